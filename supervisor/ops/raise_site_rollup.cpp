#include "supervisor/ops/raise_site_rollup.h"

#include <algorithm>
#include <map>

#include "shared/raise_site.h"

namespace pillbox {

std::vector<RaiseSite> raise_sites(const std::vector<store::FingerprintStats>& groups) {
  std::vector<RaiseSite> sites;
  sites.reserve(groups.size());
  for (const auto& g : groups) {
    std::string text = raise_site(g.kind, g.crash_state);
    std::string id = raise_site_id(g.handler_identity, text);
    sites.push_back({std::move(id), std::move(text)});
  }
  return sites;
}

std::vector<RaiseSiteRollup> raise_site_rollup(const std::vector<store::FingerprintStats>& groups) {
  const std::vector<RaiseSite> sites = raise_sites(groups);
  std::map<std::string, RaiseSiteRollup> by_site;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (sites[i].id.empty()) continue;
    RaiseSiteRollup& r = by_site[sites[i].id];
    r.site = sites[i];
    r.groups.push_back(i);
    r.records += groups[i].records;
    r.open += groups[i].open;
  }
  std::vector<RaiseSiteRollup> out;
  for (auto& [id, r] : by_site) {
    if (r.groups.size() >= 2) out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const RaiseSiteRollup& a, const RaiseSiteRollup& b) {
    return a.records > b.records;
  });
  return out;
}

}  // namespace pillbox
