#pragma once
// A record's bundle: the files that let anyone run a quarantined payload
// again the way it failed. One list for `quarantine export ID --bundle` and
// the console's record-ID.tar.gz (supervisor/serve/record_archive.h), so the
// two cannot differ.
#include <nlohmann/json.hpp>
#include <string>
#include <sys/types.h>
#include <vector>

#include "supervisor/store/quarantine_store.h"

namespace pillbox {

struct BundleFile {
  const char* name;  // a plain file name, never a path
  std::string bytes;
  mode_t mode;
};

// payload (0600), policy.policy (0600), record.json (`full`, the object of
// `quarantine show ID --json` without the payload's head, indented; 0600)
// and reproduce.sh (0700). `id` is the store's number or a fleet's entry id.
std::vector<BundleFile> record_bundle_files(const std::string& id, const store::QuarantineRecord& r,
                                            const nlohmann::json& full, std::string payload);

// reproduce.sh: the record's handler, this machine's policy for it, the
// payload beside it, one attempt, no store (`pillbox run --no-store ...`),
// so that it runs the same way on any machine with pillbox.
std::string reproduce_script(const std::string& id, const store::QuarantineRecord& r);

}  // namespace pillbox
