#include "supervisor/ops/patch_record.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "shared/sha256.h"
#include "shared/task_input.h"
#include "supervisor/ops/store_quarantine_source.h"
#include "supervisor/store/replay_store.h"
#include "supervisor/store/statement.h"

namespace pillbox {
namespace {

// A value as the summary shows it: cut, so a 64 KiB argument stays one line.
std::string shown_value(const nlohmann::json& v) {
  if (v.is_null()) return "(unset)";
  std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  constexpr std::size_t kShown = 60;
  if (text.size() > kShown) text = text.substr(0, kShown) + "...";
  return text;
}

}  // namespace

std::string patch_refusal(const std::string& id, store::RecordStatus status, const std::string& claim) {
  if (status == store::RecordStatus::kReplaying || !claim.empty()) {
    return "record " + id + " is being replayed right now (by " + (claim.empty() ? "another process" : claim) +
           "); patch it when the replay is over (a replay whose process is gone is taken back by the next "
           "`pillbox quarantine replay " + id + "`)";
  }
  if (!store::is_open(status)) {
    return "record " + id + " is " + std::string(to_string(status)) +
           ": only an open record (quarantined, allowed or failed-again) is patched; nothing changed";
  }
  return "";
}

Status check_patch_request(const PatchRequest& r) {
  const bool has_payload = r.payload.has_value();
  const bool has_args = !r.set_args.empty();
  if (has_payload == has_args) {
    return Status::error("patch what? give a new payload (--payload-file F) or handler arguments (--set-arg K=V), "
                         "one of the two",
                         ErrorCode::kUsage);
  }
  if (r.note.find_first_not_of(" \t\r\n") == std::string::npos) {
    return Status::error("a patch needs a note saying why (--note TEXT); it goes into the audit trail",
                         ErrorCode::kUsage);
  }
  if (r.note.size() > kMaxPatchNoteBytes) {
    return Status::error("the note is " + std::to_string(r.note.size()) + " bytes, more than the " +
                             std::to_string(kMaxPatchNoteBytes) + " a note may have",
                         ErrorCode::kUsage);
  }
  if (has_payload && r.payload->size() > kMaxPayloadBytes) {
    return Status::error("the new payload is larger than the 1 GiB a payload may have", ErrorCode::kUsage);
  }
  for (const auto& [key, value] : r.set_args) {
    if (key.empty() || key.size() > kMaxPatchArgKeyBytes) {
      return Status::error("--set-arg needs K=V with a name of 1 to " + std::to_string(kMaxPatchArgKeyBytes) +
                               " bytes before the '='",
                           ErrorCode::kUsage);
    }
    if (value.size() > kMaxPatchArgValueBytes) {
      return Status::error("the value of argument '" + key + "' is larger than " +
                               std::to_string(kMaxPatchArgValueBytes / 1024) + " KiB",
                           ErrorCode::kUsage);
    }
  }
  return Status::ok();
}

std::string payload_change_summary(std::string_view before, std::string_view after) {
  std::string out = "payload " + std::to_string(before.size()) + " -> " + std::to_string(after.size()) + " bytes";
  if (before.size() == after.size()) {
    // Same length: the runs of differing bytes, position by position.
    std::size_t ranges = 0, first = 0, last = 0;
    bool in_run = false;
    for (std::size_t i = 0; i < before.size(); ++i) {
      const bool differs = before[i] != after[i];
      if (differs && !in_run) {
        if (ranges == 0) first = i;
        ++ranges;
      }
      if (differs) last = i + 1;
      in_run = differs;
    }
    out += ", " + std::to_string(ranges) + " byte range" + (ranges == 1 ? "" : "s") + " changed";
    if (ranges > 0) out += " (offsets " + std::to_string(first) + "-" + std::to_string(last) + ")";
    return out;
  }
  // Another length: the one window between the common start and end.
  std::size_t prefix = 0;
  const std::size_t shorter = std::min(before.size(), after.size());
  while (prefix < shorter && before[prefix] == after[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < shorter - prefix && before[before.size() - 1 - suffix] == after[after.size() - 1 - suffix]) ++suffix;
  out += ", bytes " + std::to_string(prefix) + "-" + std::to_string(before.size() - suffix) + " replaced by " +
         std::to_string(after.size() - suffix - prefix) + " bytes";
  return out;
}

std::string args_change_summary(const std::string& before_text, const std::string& after_text) {
  auto before = nlohmann::json::parse(before_text, nullptr, false);
  auto after = nlohmann::json::parse(after_text, nullptr, false);
  if (!before.is_object()) before = nlohmann::json::object();
  if (!after.is_object()) after = nlohmann::json::object();
  std::string out;
  for (const auto& [key, value] : after.items()) {
    const nlohmann::json old = before.contains(key) ? before[key] : nlohmann::json(nullptr);
    if (old == value) continue;
    out += (out.empty() ? "" : "; ") + std::string("arg ") + shown_value(key) + ": " + shown_value(old) + " -> " +
           shown_value(value);
  }
  return out;
}

Expected<store::Revision> patch_record(store::Database& db, store::QuarantineStore& quarantine,
                                       const PatchRequest& request, std::int64_t now) {
  if (auto s = check_patch_request(request); !s) return Error{s.message(), s.code()};
  // Under the write lock: status, claim and newest revision cannot change
  // between the checks and the write.
  auto txn = store::Transaction::begin(db.handle());
  if (!txn) return Error{txn.error()};
  auto found = find_store_record(quarantine, request.record_id);
  if (!found) return Error{found.error(), found.error_code()};
  const store::QuarantineRecord& record = *found;
  auto claim = store::ReplayStore::claim_of(db, record.id);
  if (!claim) return Error{claim.error()};
  if (const std::string why = patch_refusal(std::to_string(record.id), record.status, *claim); !why.empty()) {
    return Error::usage(why);
  }
  if (!request.set_args.empty() && record.entry.handler == "exec") {
    return Error::usage("record " + std::to_string(record.id) +
                        " ran a command (exec), which has a command line, not handler arguments: --set-arg does not apply; "
                        "patch its payload (--payload-file F), or replay it under another command (quarantine replay " +
                        std::to_string(record.id) + " -- CMD ARGS...)");
  }

  store::RevisionStore revisions(db);
  auto newest = revisions.latest(record.id);
  if (!newest) return Error{newest.error()};
  // What the patch starts from: the newest revision, else the original.
  store::Revision next;
  next.record_id = record.id;
  next.payload_sha256 = *newest ? (*newest)->payload_sha256 : record.entry.payload_sha256;
  next.payload_size = *newest ? (*newest)->payload_size : record.entry.payload_size;
  next.handler_args = *newest ? (*newest)->handler_args : record.entry.handler_args;
  next.created_at = now;
  next.actor = request.actor;
  next.note = request.note;
  const std::string from = *newest ? "revision " + std::to_string((*newest)->n) : std::string("the original");

  if (request.payload) {
    const std::string sha = sha256_hex(*request.payload);
    if (sha == next.payload_sha256) {
      return Error::usage("the new payload is the same as " + from + " of record " + std::to_string(record.id) +
                          " (sha256 " + sha + "): nothing to patch");
    }
    // A missing or damaged payload before is a reason to patch, not to refuse:
    // the summary says what is known.
    auto current = quarantine.payloads().get(next.payload_sha256);
    next.summary = current ? payload_change_summary(*current, *request.payload)
                           : "payload -> " + std::to_string(request.payload->size()) + " bytes (" + from +
                                 "'s payload is unreadable: " + current.error() + ")";
    if (auto s = quarantine.payloads().put(*request.payload, sha, now); !s) return Error{s.message()};
    next.payload_sha256 = sha;
    next.payload_size = static_cast<std::int64_t>(request.payload->size());
  } else {
    auto args = nlohmann::json::parse(next.handler_args, nullptr, false);
    if (!args.is_object()) {
      return Error{"record " + std::to_string(record.id) + "'s handler arguments are unreadable: " + next.handler_args};
    }
    for (const auto& [key, value] : request.set_args) args[key] = value;
    const std::string after = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    next.summary = args_change_summary(next.handler_args, after);
    if (next.summary.empty()) {
      return Error::usage("these arguments are what " + from + " of record " + std::to_string(record.id) +
                          " already has: nothing to patch");
    }
    next.handler_args = after;
  }

  auto n = revisions.append(next);
  if (!n) return Error{n.error()};
  next.n = *n;
  if (auto s = quarantine.audit(record.id, now, request.actor, "patched",
                                "revision " + std::to_string(next.n) + " (from " + from + "): " + next.summary +
                                    "; note: " + request.note);
      !s) {
    return Error{s.message()};
  }
  // An allowance was of what the record ran before: what a replay would run
  // now is the new revision, which nobody has reviewed yet.
  if (record.status == store::RecordStatus::kAllowed) {
    auto back = quarantine.change_status(record.id, store::RecordStatus::kAllowed, store::RecordStatus::kQuarantined,
                                         now, request.actor, std::string(store::review_action(store::Review::kRevoke)),
                                         "patched: revision " + std::to_string(next.n) +
                                             " awaits review, and quarantine allow allows it again (was allowed)");
    if (!back) return Error{back.error()};
  }
  if (auto s = txn->commit(); !s) return Error{s.message()};
  return next;
}

}  // namespace pillbox
