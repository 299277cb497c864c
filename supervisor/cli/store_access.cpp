#include "supervisor/cli/store_access.h"

#include "supervisor/store/store_dir.h"

namespace pillbox::cli {

namespace {

Expected<std::unique_ptr<StoreAccess>> open_store(const Args& args, bool create) {
  auto dir = store::resolve_store_dir(args.value("store").value_or(""));
  if (!dir) return Error{dir.error(), ErrorCode::kUsage};
  auto opened = create ? store::Store::open(*dir) : store::Store::open_existing(*dir);
  if (!opened) return Error{opened.error(), ErrorCode::kSetup};
  auto access = std::make_unique<StoreAccess>(std::move(*opened));
  auto q = store::QuarantineStore::open(access->store.db(), access->store.dir());
  if (!q) return Error{q.error(), ErrorCode::kSetup};
  access->quarantine.emplace(std::move(*q));
  return access;
}

}  // namespace

Expected<std::unique_ptr<StoreAccess>> open_existing_store(const Args& args) { return open_store(args, false); }

Expected<std::unique_ptr<StoreAccess>> open_or_create_store(const Args& args) { return open_store(args, true); }

}  // namespace pillbox::cli
