#include "supervisor/ops/raise_site_rollup.h"

#include <algorithm>
#include <map>

#include "shared/raise_site.h"

namespace pillbox {

std::vector<std::string> raise_sites(const std::vector<store::FingerprintStats>& groups) {
  std::vector<std::string> sites;
  sites.reserve(groups.size());
  for (const auto& g : groups) sites.push_back(raise_site(g.kind, g.crash_state));
  return sites;
}

std::vector<RaiseSiteRollup> raise_site_rollup(const std::vector<store::FingerprintStats>& groups) {
  const std::vector<std::string> sites = raise_sites(groups);
  std::map<std::string, RaiseSiteRollup> by_site;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (sites[i].empty()) continue;
    RaiseSiteRollup& r = by_site[sites[i]];
    r.site = sites[i];
    r.groups.push_back(i);
    r.records += groups[i].records;
    r.open += groups[i].open;
  }
  std::vector<RaiseSiteRollup> out;
  for (auto& [site, r] : by_site) {
    if (r.groups.size() >= 2) out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const RaiseSiteRollup& a, const RaiseSiteRollup& b) {
    return a.records > b.records;
  });
  return out;
}

}  // namespace pillbox
