#include "supervisor/cli/store_access.h"

#include "supervisor/cli/commands.h"
#include "supervisor/store/store_dir.h"

namespace pillbox::cli {

namespace {

std::unique_ptr<StoreAccess> open_store(const std::string& flag, bool create, StoreAccessError& error) {
  auto dir = store::resolve_store_dir(flag);
  if (!dir) {
    error = {dir.error(), kExitUsage};
    return nullptr;
  }
  auto opened = create ? store::Store::open(*dir) : store::Store::open_existing(*dir);
  if (!opened) {
    error = {opened.error(), kExitSetup};
    return nullptr;
  }
  auto access = std::make_unique<StoreAccess>(std::move(*opened));
  auto q = store::QuarantineStore::open(access->store.db(), access->store.dir());
  if (!q) {
    error = {q.error(), kExitSetup};
    return nullptr;
  }
  access->quarantine.emplace(std::move(*q));
  return access;
}

}  // namespace

std::unique_ptr<StoreAccess> open_existing_store(const std::string& flag, StoreAccessError& error) {
  return open_store(flag, false, error);
}

std::unique_ptr<StoreAccess> open_or_create_store(const std::string& flag, StoreAccessError& error) {
  return open_store(flag, true, error);
}

}  // namespace pillbox::cli
