#pragma once
// Opening the store for the commands that act on what it holds (quarantine,
// reproduce, minimize): it must exist already; errors come with the exit
// code to use (2: no usable --store or PILLBOX_STORE, 3: cannot be opened).
#include <memory>
#include <optional>
#include <string>

#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/store.h"

namespace pillbox::cli {

struct StoreAccess {
  explicit StoreAccess(store::Store s) : store(std::move(s)) {}
  store::Store store;
  std::optional<store::QuarantineStore> quarantine;  // refers to `store`: the struct does not move
};

struct StoreAccessError {
  std::string message;
  int exit_code = 3;
};

// `flag`: the --store value ("" when not given).
std::unique_ptr<StoreAccess> open_existing_store(const std::string& flag, StoreAccessError& error);
// For commands that add records (fuzz, quarantine import): created when missing, like `run` does.
std::unique_ptr<StoreAccess> open_or_create_store(const std::string& flag, StoreAccessError& error);

}  // namespace pillbox::cli
