#include "supervisor/broker/fleet_revisions.h"

#include <algorithm>
#include <limits>

#include "shared/sha256.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/quarantine_views_json.h"

namespace pillbox::broker {
namespace {

// The fields a revision's sig covers, `sig` among them when given: whose
// record (its id and its own payload, so a revision copied onto another
// record does not verify), which revision, which bytes, who, when, and
// what they said of it (the note and the change: another operator reviews
// by them, so one rewritten in the state must not read as signed).
SignedFields revision_fields(const FleetRecord& record, const FleetRevision& v) {
  SignedFields fields = {{"record", record.id},
                         {"record_payload_sha256", record.record.entry.payload_sha256},
                         {"n", std::to_string(v.n)},
                         {"payload_sha256", v.payload_sha256},
                         {"payload_size", std::to_string(v.payload_size)},
                         {"actor", v.actor},
                         {"at", std::to_string(v.created_at)},
                         {"note", v.note},
                         {"summary", v.summary}};
  if (!v.sig.empty()) fields.emplace_back("sig", v.sig);
  return fields;
}

std::string revision_name(const FleetRecord& record, const FleetRevision& v) {
  return "record " + record.id + "'s revision " + std::to_string(v.n);
}

// Fleet tasks are a key and a payload: the handler and its arguments are
// the workers' (their --arg), so a revision has no arguments to change.
std::string set_arg_refusal(const std::string& id) {
  return "--set-arg does not apply on the fleet's quarantine: its tasks carry no handler arguments (the workers' own "
         "--arg decides them); patch the payload instead (pillbox quarantine patch " + id +
         " --payload-file F --note TEXT), or start the workers with other --arg";
}

// The number a patch gives its revision: above every one before, whatever
// the state says (0: none is left below the int64 limit).
std::int64_t next_revision_number(const FleetState& state) {
  std::int64_t most = static_cast<std::int64_t>(state.revisions.size());
  for (const FleetRevision& v : state.revisions) most = std::max(most, v.n);
  return most < std::numeric_limits<std::int64_t>::max() ? most + 1 : 0;
}

// Why `record`'s newest revision is not numbered above all the others, as
// a patch numbers it (next_revision_number); "" when it is.
std::string revision_numbering_refusal(const FleetRecord& record) {
  const auto& revisions = record.state.revisions;
  if (revisions.size() < 2) return "";
  const FleetRevision& newest = revisions.back();
  std::int64_t before = revisions[0].n;
  for (std::size_t i = 0; i + 1 < revisions.size(); ++i) before = std::max(before, revisions[i].n);
  if (before < newest.n) return "";
  return "record " + record.id + "'s newest revision (the last of " + std::to_string(revisions.size()) +
         ") is numbered " + std::to_string(newest.n) + ", not above revision " + std::to_string(before) +
         " before it: a patch numbers its revision above all before it, so this state was written by hand (an "
         "older revision copied to the end, or renumbered), and which one is newest is not the operators' word; "
         "never run. Look at it (pillbox quarantine show " + record.id + "), then patch it again with the fleet's "
         "key (pillbox quarantine patch " + record.id + " --payload-file F --note TEXT), which numbers the new "
         "revision above all";
}

}  // namespace

const FleetRevision* newest_revision(const FleetState& state) {
  return state.revisions.empty() ? nullptr : &state.revisions.back();
}

Signature revision_signature(const FleetDeadLetters& dead_letters, const FleetRecord& record,
                             const FleetRevision& revision) {
  const FleetKey* key = dead_letters.key();
  if (key == nullptr) return Signature::kUnchecked;
  return key->verify_revision(dead_letters.signed_name(), revision_fields(record, revision));
}

Status check_newest_revision(const FleetDeadLetters& dead_letters, const FleetRecord& r, bool trust_unsigned) {
  const FleetRevision* v = newest_revision(r.state);
  if (v == nullptr) return Status::ok();
  // A signed revision copied to the end would be "the newest" by the
  // writer's choice: the state's order is anyone's, the numbers are signed.
  if (const std::string why = revision_numbering_refusal(r); !why.empty()) return Status::error(why);
  if (trust_unsigned) return Status::ok();
  const std::string again = "; patch it again with the fleet's key (pillbox quarantine patch " + r.id +
                            " --payload-file F --note TEXT --fleet-key FILE), or --trust-unsigned runs it anyway";
  switch (revision_signature(dead_letters, r, *v)) {
    case Signature::kValid:
      return Status::ok();
    case Signature::kUnchecked:
      return Status::error(revision_name(r, *v) + " was not checked: give the fleet's key (--fleet-key FILE, or "
                           "PILLBOX_FLEET_KEY=FILE), the one operators patch records with" + again);
    case Signature::kMissing:
      return Status::error(revision_name(r, *v) + " is unsigned: patched without the fleet's key, or written into its "
                           "state by anyone who can write there; never run on its word" + again);
    case Signature::kBad:
      return Status::error(revision_name(r, *v) + " does not match the fleet key: not this record's (another "
                           "record's), changed since it was signed (another payload, number or author), or signed "
                           "with another key; never run" + again);
  }
  return Status::ok();
}

Expected<RedrivePayload> redrive_payload(FleetDeadLetters& dead_letters, const FleetRecord& record,
                                         bool trust_unsigned) {
  const FleetRevision* v = newest_revision(record.state);
  if (v == nullptr) return RedrivePayload{};
  if (auto ok = check_newest_revision(dead_letters, record, trust_unsigned); !ok) return Error::usage(ok.message());
  auto bytes = dead_letters.revision_payload(record, *v);
  if (!bytes) {
    if (bytes.error_code() != ErrorCode::kUsage) return Error{bytes.error(), bytes.error_code()};
    return Error::usage(revision_name(record, *v) + " cannot be replayed: " + bytes.error() +
                        "; not redriven (patch it again: pillbox quarantine patch " + record.id +
                        " --payload-file F --note TEXT)");
  }
  return RedrivePayload{v->n, std::move(*bytes), v->payload_sha256};
}

nlohmann::json fleet_revisions_json(const FleetDeadLetters& dead_letters, const FleetRecord& record) {
  nlohmann::json out = nlohmann::json::array();
  for (const FleetRevision& v : record.state.revisions) {
    store::Revision shown;
    shown.n = v.n;
    shown.payload_sha256 = v.payload_sha256;
    shown.payload_size = v.payload_size;
    shown.handler_args = record.record.entry.handler_args;  // a fleet's patch changes the payload only
    shown.created_at = v.created_at;
    shown.actor = v.actor;
    shown.note = v.note;
    shown.summary = v.summary;
    nlohmann::json j = revision_json(shown);
    j["signature"] = to_string(revision_signature(dead_letters, record, v));
    out.push_back(std::move(j));
  }
  return out;
}

Expected<store::Revision> patch_fleet_record(FleetDeadLetters& dead_letters, const std::string& id,
                                             const PatchRequest& request, std::int64_t now) {
  if (auto s = check_patch_request(request); !s) return Error{s.message(), s.code()};
  if (!request.set_args.empty()) return Error::usage(set_arg_refusal(id));
  auto found = dead_letters.get(id);
  if (!found) return Error{found.error(), found.error_code()};
  const FleetRecord& record = *found;
  if (const std::string why = patch_refusal(id, record.record.status, record.replaying_by); !why.empty()) {
    return Error::usage(why);
  }
  // What the patch starts from: the newest revision, else the original.
  const FleetRevision* newest = newest_revision(record.state);
  const std::size_t revisions_before = record.state.revisions.size();
  const std::string from = newest != nullptr ? "revision " + std::to_string(newest->n) : std::string("the original");
  const std::string& payload = *request.payload;
  const std::string sha = sha256_hex(payload);
  if (sha == (newest != nullptr ? newest->payload_sha256 : record.record.entry.payload_sha256)) {
    return Error::usage("the new payload is the same as " + from + " of record " + id + " (sha256 " + sha +
                        "): nothing to patch");
  }
  // A payload before that cannot be read is a reason to patch, not to
  // refuse: the summary says what is known.
  auto current = newest != nullptr ? dead_letters.revision_payload(record, *newest) : checked_payload(record);
  if (!current && current.error_code() != ErrorCode::kUsage && newest != nullptr) {
    return Error{current.error(), current.error_code()};  // the broker failed
  }
  const std::string summary = current ? payload_change_summary(*current, payload)
                                      : "payload -> " + std::to_string(payload.size()) + " bytes (" + from +
                                            "'s payload is unreadable: " + current.error() + ")";
  // The bytes first, then the state that names them.
  auto at = dead_letters.keep_revision_payload(record, payload);
  if (!at) return Error{at.error(), at.error_code()};

  FleetRevision next;
  next.payload_sha256 = sha;
  next.payload_size = static_cast<std::int64_t>(payload.size());
  next.at = *at;
  next.created_at = now;
  next.actor = request.actor;
  next.note = request.note;
  next.summary = summary;
  auto changed = dead_letters.change_state(id, true, [&](FleetState& s, const FleetRecord& current_record) {
    if (const std::string why = patch_refusal(id, s.status, ""); !why.empty()) {
      return Status::error(why, ErrorCode::kUsage);
    }
    if (s.revisions.size() != revisions_before) {
      const FleetRevision& other = s.revisions.back();
      // Its author is the state's claim: shown as a cell.
      return Status::error("record " + id + " was patched meanwhile (revision " + std::to_string(other.n) + " by " +
                               table_cell(other.actor, 80) + "): yours was not stored; look at it (pillbox "
                               "quarantine show " + id + ") and patch again if it is still wanted",
                           ErrorCode::kUsage);
    }
    next.n = next_revision_number(s);
    if (next.n == 0) {
      return Status::error("record " + id + "'s state numbers a revision at the int64 limit: not written by pillbox; "
                           "look at it (pillbox quarantine show " + id + ") and discard the record, or write its "
                           "state back from a backup",
                           ErrorCode::kUsage);
    }
    if (const FleetKey* key = dead_letters.key()) {
      next.sig = key->sign_revision(dead_letters.signed_name(), revision_fields(current_record, next));
    }
    s.revisions.push_back(next);
    s.updated_at = now;
    s.audit.push_back({now, request.actor, "patched",
                       "revision " + std::to_string(next.n) + " (from " + from + "): " + summary + "; note: " +
                           request.note});
    // An allowance was of what the record ran before: what a replay would
    // run now is the new revision, which nobody has reviewed yet.
    if (s.status == store::RecordStatus::kAllowed) {
      s.status = store::RecordStatus::kQuarantined;
      s.allowance = FleetAllowance{};
      s.audit.push_back({now, request.actor, std::string(store::review_action(store::Review::kRevoke)),
                         "patched: revision " + std::to_string(next.n) +
                             " awaits review, and quarantine allow allows it again (was allowed)"});
    }
    return Status::ok();
  });
  if (!changed) return Error{changed.error(), changed.error_code()};
  store::Revision done;
  done.n = next.n;
  done.payload_sha256 = next.payload_sha256;
  done.payload_size = next.payload_size;
  done.handler_args = record.record.entry.handler_args;
  done.created_at = now;
  done.actor = next.actor;
  done.note = next.note;
  done.summary = next.summary;
  return done;
}

}  // namespace pillbox::broker
