// pillbox quarantine list / show / stats / export / discard / allow, written once
// against QuarantineSource for either quarantine (quarantine_verbs.h). What
// one back end cannot do is its capability; the verb says so.
#include <cstdio>
#include <functional>
#include <string>

#include "shared/failure_kind.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/ops/store_quarantine_source.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

template <class T>
int failed(const Expected<T>& e) {
  return quarantine_error(e.error(), exit_code_for(e.error_code()));
}

// The one record show and export act on.
Expected<SourcedRecord> one_record(const RecordsContext& c) {
  auto id = c.source.parse_id(c.args.positional()[0]);
  if (!id) return Error{id.error(), ErrorCode::kUsage};
  return c.source.get(*id);
}

// export --revision N: its number, checked against the other options.
Expected<std::int64_t> wanted_revision(const RecordsContext& c, const SourcedRecord& r) {
  const auto wanted = c.args.value("revision");
  if (!wanted) return std::int64_t{0};
  if (c.args.flag("minimized")) return Error{"give --minimized or --revision N, not both", ErrorCode::kUsage};
  if (c.args.flag("bundle")) {
    return Error{"--revision goes without --bundle: a bundle holds the original payload and the command that runs it",
                 ErrorCode::kUsage};
  }
  auto n = parse_record_id(*wanted);  // a positive number, as record ids are
  if (!n) {
    return Error{"--revision takes a revision number, 1 or more (quarantine show " + id_text(r.id) + " lists them)",
                 ErrorCode::kUsage};
  }
  return *n;
}

// The ids of the records `filter` matches that `wanted` takes, each checked
// as a named one is: one a replay holds refuses them all (check_discardable,
// `act`). `left` counts those matched but not wanted.
Expected<std::vector<nlohmann::json>> matching_records(const RecordsContext& c, const store::ListFilter& filter,
                                                       const std::function<bool(const SourcedRecord&)>& wanted,
                                                       const std::string& act, std::size_t& left) {
  std::vector<nlohmann::json> ids;
  Status refused = Status::ok();
  const Status each = c.source.each(filter, [&](const SourcedRecord& r) {
    if (!wanted(r)) {
      ++left;
      return true;
    }
    refused = c.source.check_discardable(r, act);
    if (!refused) return false;
    ids.push_back(r.id);
    return true;
  });
  if (!each) return Error{each.message(), each.code()};
  if (!refused) return Error{refused.message(), ErrorCode::kUsage};
  return ids;
}

// discard --raise-site RS: the ids of the open records of one raise site
// (the groups of one bug, as stats rolls them up).
Expected<std::vector<nlohmann::json>> raise_site_records(const RecordsContext& c, const std::string& site) {
  store::ListFilter filter;
  filter.raise_site = site;
  std::size_t closed = 0;
  auto ids = matching_records(
      c, filter, [](const SourcedRecord& r) { return store::is_open(r.record.status); }, "discard", closed);
  if (ids && ids->empty()) {
    return Error{"no open record is at raise site " + site + " (quarantine stats names the raise sites)",
                 ErrorCode::kUsage};
  }
  return ids;
}

// The ids a verb names, each read and checked (`check`) before any record
// changes: a typo, or one record that may not change, changes nothing.
Expected<std::vector<nlohmann::json>> named_records(const RecordsContext& c,
                                                    const std::function<Status(const SourcedRecord&)>& check) {
  std::vector<nlohmann::json> ids;
  for (const auto& text : c.args.positional()) {
    if (auto id = c.source.parse_id(text); !id) return Error{id.error(), ErrorCode::kUsage};
    auto r = c.source.get(text);  // (named as typed in its errors)
    if (!r) return Error{r.error(), r.error_code()};
    if (auto ok = check(*r); !ok) return Error{ok.message(), ErrorCode::kUsage};
    ids.push_back(r->id);
  }
  return ids;
}

}  // namespace

int quarantine_list(const RecordsContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  return list_records(c.args, std::move(*filter), c.source);
}

int quarantine_show(const RecordsContext& c) {
  auto r = one_record(c);
  if (!r) return failed(r);
  auto full = c.source.full_json(*r);
  if (!full) return quarantine_error(full.error(), kExitSetup);
  auto payload = c.source.payload(*r);
  ShownRecord shown{r->id,
                    r->record,
                    std::move(*full),
                    payload ? Expected<std::string>(std::move(payload->bytes))
                            : Expected<std::string>(Error{payload.error(), payload.error_code()}),
                    std::nullopt,
                    "pillbox reproduce " + r->id_text() + c.source.hint_options()};
  if (!r->record.minimized_sha256.empty()) {
    if (auto mini = c.source.minimized_payload(*r)) shown.minimized_size = mini->bytes.size();
  }
  return print_record(shown, c.args.flag("json"));
}

int quarantine_stats(const RecordsContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  std::vector<nlohmann::json> examples;
  auto groups = c.source.stats(*filter, examples);
  if (!groups) return failed(groups);
  const int exit_code = print_stats(*groups, examples, c.args.flag("json"));
  if (const std::string left_out = c.source.left_out(); !left_out.empty()) {
    std::fprintf(stderr, "%s\n", left_out.c_str());
  }
  return exit_code;
}

int quarantine_export(const RecordsContext& c) {
  if (auto id = c.source.parse_id(c.args.positional()[0]); !id) return quarantine_error(id.error(), kExitUsage);
  if (auto s = check_export_options(c.args); !s) return quarantine_error(s.message(), kExitUsage);
  auto r = one_record(c);
  if (!r) return failed(r);
  auto revision = wanted_revision(c, *r);
  if (!revision) return failed(revision);
  const bool bundle = c.args.flag("bundle");
  // A bundle's reproduce.sh runs what the record names: only one that may run.
  if (bundle) {
    if (auto ok = c.source.check_runnable(*r, c.args.flag("trust-unsigned")); !ok) {
      return quarantine_error(ok.message(), kExitUsage);
    }
  }
  auto payload = c.args.flag("minimized") ? c.source.minimized_payload(*r) : c.source.payload(*r, *revision);
  if (!payload) return failed(payload);
  nlohmann::json full;
  if (bundle) {
    auto f = c.source.full_json(*r);
    if (!f) return quarantine_error(f.error(), kExitSetup);
    full = std::move(*f);
  }
  return export_record(c.args, r->id, r->record, full, payload->bytes, payload->sha256);
}

int quarantine_discard(const RecordsContext& c) {
  const auto site = c.args.value("raise-site");
  const bool by_site = c.source.can().discard_by_raise_site;
  if (site && !by_site) {
    return quarantine_error("discard --raise-site works on the store's quarantine; on the fleet's, name the records "
                            "(quarantine list --raise-site S --redis URL --stream NAME shows them)",
                            kExitUsage);
  }
  const auto reason = c.args.value("reason");
  if (!reason || reason->empty()) return quarantine_error("discard needs --reason TEXT (kept in the audit trail)", kExitUsage);
  if (!by_site && c.args.positional().empty()) return quarantine_error("discard needs at least one record ID", kExitUsage);
  if (c.args.positional().empty() == !site) {
    return quarantine_error("discard what? give record IDs, or --raise-site ID (its open records), one of these",
                            kExitUsage);
  }
  // All ids are checked before any record changes: a typo changes nothing.
  std::vector<nlohmann::json> ids;
  if (site) {
    if (auto s = check_raise_site_id(*site); !s) return quarantine_error(s.message(), kExitUsage);
    auto found = raise_site_records(c, *site);
    if (!found) return failed(found);
    ids = std::move(*found);
  }
  auto named = named_records(c, [&](const SourcedRecord& r) { return c.source.check_discardable(r, "discard"); });
  if (!named) return failed(named);
  ids.insert(ids.end(), named->begin(), named->end());
  const std::string actor = actor_name("quarantine discard");
  StatusChangeReport report(c.args.flag("json"), kDiscardWords);
  for (const auto& id : ids) {
    auto done = c.source.discard(id_text(id), actor, *reason);
    if (!done) return failed(done);
    if (done->already) {
      report.already(id);
    } else {
      report.changed(id, done->was);
    }
  }
  report.finish();
  return kExitOk;
}

int quarantine_allow(const RecordsContext& c) {
  const store::Review review = c.args.flag("revoke") ? store::Review::kRevoke : store::Review::kAllow;
  const std::string act = review == store::Review::kAllow ? "allow" : "revoke";
  store::ListFilter filter;
  filter.fingerprint = c.args.value("fingerprint");
  filter.kind = c.args.value("kind");
  if (filter.kind && !kind_from_string(*filter.kind)) {
    return quarantine_error("unknown kind '" + *filter.kind + "' (see pillbox run --help)", kExitUsage);
  }
  if (auto site = c.args.value("raise-site")) {
    if (auto s = check_raise_site_id(*site); !s) return quarantine_error(s.message(), kExitUsage);
    filter.raise_site = *site;
  }
  const bool filtered = filter.fingerprint || filter.kind || filter.raise_site;
  if (c.args.positional().empty() == !filtered) {
    return quarantine_error(act + " what? give record IDs, or --fingerprint FP, --kind K and/or --raise-site RS "
                                  "(the records they match that await review), one of these",
                            kExitUsage);
  }
  // All are checked before any record changes: a typo, or a record that may
  // not move, changes nothing.
  auto movable = [&](const SourcedRecord& r) -> Status {
    if (auto ok = c.source.check_discardable(r, act); !ok) return ok;
    const store::ReviewStep step = store::review_step(r.record.status, review);
    if (!step.refusal.empty()) return Status::error("record " + r.id_text() + " " + step.refusal, ErrorCode::kUsage);
    return Status::ok();
  };
  std::size_t left = 0;
  auto ids = filtered ? matching_records(
                            c, filter,
                            [&](const SourcedRecord& r) {
                              // By a filter: those the review moves; the rest are left, and counted.
                              const store::ReviewStep step = store::review_step(r.record.status, review);
                              return step.refusal.empty() && !step.already;
                            },
                            act, left)
                      : named_records(c, movable);
  if (!ids) return failed(ids);
  if (filtered && ids->empty()) {
    return quarantine_error(std::string("no matching record ") +
                                (review == store::Review::kAllow ? "awaits review (quarantined or failed-again)"
                                                                 : "is allowed") +
                                "; quarantine list shows their status",
                            kExitUsage);
  }
  const std::string actor = actor_name("quarantine allow");
  const std::string note = c.args.value("note").value_or("");
  StatusChangeReport report(c.args.flag("json"), review == store::Review::kAllow ? kAllowWords : kRevokeWords);
  bool unsigned_allowances = false;
  for (const auto& id : *ids) {
    auto done = c.source.review(id_text(id), review, actor, note);
    if (!done) return failed(done);
    unsigned_allowances = unsigned_allowances || done->unsigned_allowance;
    if (done->already) {
      report.already(id);
    } else {
      report.changed(id, done->was);
    }
  }
  report.finish();
  if (left > 0) {
    std::fprintf(stderr, "%zu matching record%s left as %s: %s\n", left, left == 1 ? "" : "s",
                 left == 1 ? "it is" : "they are",
                 review == store::Review::kAllow ? "allowed already, resolved, discarded or being replayed"
                                                 : "not allowed");
  }
  if (unsigned_allowances) {
    std::fprintf(stderr, "pillbox quarantine allow: no fleet key: these allowances are unsigned, and replay --allowed "
                         "takes them only with --trust-unsigned (give --fleet-key FILE to sign them)\n");
  }
  return kExitOk;
}

}  // namespace pillbox::cli
