#include "supervisor/ops/quarantine_source.h"

namespace pillbox {

Expected<std::int64_t> QuarantineSource::each_counted(const store::ListFilter& filter,
                                                      const std::function<void(const SourcedRecord&)>& fn) {
  const Status each = this->each(filter, [&](const SourcedRecord& r) {
    fn(r);
    return true;
  });
  if (!each) return Error{each.message(), each.code()};
  return count(filter);
}

}  // namespace pillbox
