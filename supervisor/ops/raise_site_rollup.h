#pragma once
// The "same raise site" rollup of `quarantine stats` (issue 26, point 7):
// groups (fingerprints) of one program raised at one place
// (shared/raise_site.h) but reached through other callers, shown together
// in the CLI, the console and --json, so that they can be replayed and
// discarded as one (--raise-site ID).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/store/quarantine_store.h"

namespace pillbox {

struct RaiseSite {
  std::string id;    // "rs-..." ("" when the group has none)
  std::string text;  // "ValueError at parse_date (parse.py)"
};

struct RaiseSiteRollup {
  RaiseSite site;
  std::vector<std::size_t> groups;  // indexes into the stats, in their order
  std::int64_t records = 0;
  std::int64_t open = 0;
};

// Each group's raise site, in the order of `groups`.
std::vector<RaiseSite> raise_sites(const std::vector<store::FingerprintStats>& groups);

// The raise sites that two or more of `groups` share, the most records first.
std::vector<RaiseSiteRollup> raise_site_rollup(const std::vector<store::FingerprintStats>& groups);

}  // namespace pillbox
