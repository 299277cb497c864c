#pragma once
// Opening the store of --store DIR (or its default) for the commands that act
// on what it holds. Errors carry their code: usage when there is no usable
// --store or PILLBOX_STORE, setup when the store cannot be opened.
#include <memory>
#include <optional>

#include "shared/status.h"
#include "supervisor/cli/args.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/store.h"

namespace pillbox::cli {

struct StoreAccess {
  explicit StoreAccess(store::Store s) : store(std::move(s)) {}
  store::Store store;
  std::optional<store::QuarantineStore> quarantine;  // refers to `store`: the struct does not move
};

// The store, which must exist.
Expected<std::unique_ptr<StoreAccess>> open_existing_store(const Args& args);
// For commands that add records (fuzz, quarantine import): created when missing, like `run` does.
Expected<std::unique_ptr<StoreAccess>> open_or_create_store(const Args& args);

}  // namespace pillbox::cli
