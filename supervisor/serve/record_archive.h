#pragma once
// A record's bundle (supervisor/ops/record_bundle.h) as one gzip-compressed
// tar file, for GET /api/records/ID/bundle: each file under TOP/ with its
// mode, as `tar xzf` unpacks it into the directory `export --bundle` writes.
// Written by libarchive (ustar), in memory.
#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/ops/record_bundle.h"

namespace pillbox::serve {

// `top`: the directory the files sit under ("record-12"), a plain name;
// `mtime_s`: the time every entry carries (seconds since the epoch).
Expected<std::string> bundle_tar_gz(const std::string& top, const std::vector<BundleFile>& files,
                                    std::int64_t mtime_s);

}  // namespace pillbox::serve
