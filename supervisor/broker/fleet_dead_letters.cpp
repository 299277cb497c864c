#include "supervisor/broker/fleet_dead_letters.h"

#include <algorithm>
#include <map>
#include <utility>

#include "shared/raise_site.h"
#include "supervisor/broker/fleet_allowance.h"
#include "supervisor/classify/outcome_json.h"

namespace pillbox::broker {

bool fleet_matches(const FleetRecord& fr, const store::ListFilter& f) {
  const store::QuarantineRecord& r = fr.record;
  if (f.status && r.status != *f.status) return false;
  if (f.kind && r.entry.kind != *f.kind) return false;
  if (f.fingerprint && r.entry.fingerprint != *f.fingerprint) return false;
  if (f.key && r.entry.key != *f.key) return false;
  if (f.since_ms && r.created_at < *f.since_ms) return false;
  if (f.source && r.entry.source != *f.source) return false;
  if (f.handler && r.entry.handler != *f.handler) return false;
  if (f.raise_site &&
      raise_site_id(r.entry.handler_identity, raise_site(r.entry.kind, r.entry.crash_state)) != *f.raise_site) {
    return false;
  }
  return true;
}

Signature allowance_signature(const FleetDeadLetters& dead_letters, const FleetRecord& record) {
  return allowance_signature(dead_letters.key(), dead_letters.signed_name(), record);
}

Status each_matching(FleetDeadLetters& dead_letters, const store::ListFilter& filter,
                     const std::function<bool(const FleetRecord&)>& fn) {
  std::int64_t skipped = 0, shown = 0;
  return dead_letters.each([&](const FleetRecord& r) {
    if (!fleet_matches(r, filter)) return true;
    if (skipped < filter.offset) {
      ++skipped;
      return true;
    }
    if (filter.limit >= 0 && shown >= filter.limit) return false;
    ++shown;
    return fn(r);
  });
}

namespace {

// `filter` without its limit and offset: every record it matches.
store::ListFilter unpaged(store::ListFilter filter) {
  filter.limit = -1;
  filter.offset = 0;
  return filter;
}

}  // namespace

Expected<std::int64_t> count_matching(FleetDeadLetters& dead_letters, const store::ListFilter& filter) {
  std::int64_t n = 0;
  auto counted = each_matching(dead_letters, unpaged(filter), [&](const FleetRecord&) {
    ++n;
    return true;
  });
  if (!counted) return Error{counted.message(), counted.code()};
  return n;
}

Expected<std::vector<store::FingerprintStats>> fleet_stats(FleetDeadLetters& dead_letters,
                                                           const store::ListFilter& filter,
                                                           std::vector<std::string>& example_ids) {
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  std::vector<store::FingerprintStats> groups;
  std::vector<std::string> examples;
  // Newest first: the first record of a group is its example, as the
  // store's newest record is.
  auto s = each_matching(dead_letters, unpaged(filter), [&](const FleetRecord& fr) {
    const store::QuarantineRecord& r = fr.record;
    auto [it, added] = index.try_emplace({r.entry.fingerprint, r.entry.kind}, groups.size());
    if (added) {
      store::FingerprintStats g;
      g.fingerprint = r.entry.fingerprint;
      g.kind = r.entry.kind;
      g.first_ms = r.created_at;
      g.message = r.entry.message;
      g.crash_state = crash_state_text(r.entry.crash_state);
      g.handler_identity = r.entry.handler_identity;
      groups.push_back(std::move(g));
      examples.push_back(fr.id);
    }
    store::FingerprintStats& g = groups[it->second];
    ++g.records;
    if (store::is_open(r.status)) ++g.open;
    g.repeats += r.repeats;
    ++g.by_status[r.status];
    g.first_ms = std::min(g.first_ms, r.created_at);
    g.last_ms = std::max({g.last_ms, r.created_at, r.updated_at});
    return true;
  });
  if (!s) return Error{s.message(), s.code()};
  // The store's order: most records first, then the most recently seen.
  std::vector<std::size_t> order(groups.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (groups[a].records != groups[b].records) return groups[a].records > groups[b].records;
    return groups[a].last_ms > groups[b].last_ms;
  });
  std::vector<store::FingerprintStats> sorted;
  example_ids.clear();
  for (std::size_t i : order) {
    sorted.push_back(std::move(groups[i]));
    example_ids.push_back(examples[i]);
  }
  return sorted;
}

std::string store_only_verb(const std::string& verb) {
  return verb + " works on the store only, not on the fleet's quarantine (--redis, --amqp, --kafka)";
}

Status record_reproduction(FleetDeadLetters& dead_letters, const std::string& id, const std::string& verdict,
                           std::int64_t runs, std::int64_t matches, const std::string& actor,
                           const std::string& detail) {
  auto r = dead_letters.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
    s.reproduce_verdict = verdict;
    s.reproduce_runs = runs;
    s.reproduce_matches = matches;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, actor, "reproduced", detail});
    return Status::ok();
  });
  return r ? Status::ok() : Status::error(r.error(), r.error_code());
}

Status record_minimized(FleetDeadLetters& dead_letters, const std::string& id, const std::string& sha256,
                        std::int64_t at, const std::string& actor, const std::string& detail) {
  return dead_letters.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
    s.minimized_sha256 = sha256;
    s.minimized_at = at;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, actor, "minimized", detail});
    return Status::ok();
  }).status();
}

}  // namespace pillbox::broker
