#include "supervisor/serve/console_source.h"

#include "supervisor/ops/quarantine_views_json.h"

namespace pillbox::serve {
namespace {

// What the listing left out and why (the CLI says it on stderr), never
// hidden: "left_out", when anything was.
void add_left_out(const QuarantineSource& q, ApiReply& reply) {
  if (const std::string left_out = q.left_out(); !left_out.empty()) reply.body["left_out"] = left_out;
}

}  // namespace

ApiReply ConsoleSource::failure(const std::string& message, ErrorCode code, int usage_status) {
  return failure_reply(message, code, usage_status);
}

std::optional<store::ListFilter> ConsoleSource::filter_of(const Query& query, bool paging, ApiReply& error) const {
  auto filter = records_filter(query, paging);
  if (!filter) {
    error = error_reply(400, filter.error());
    return std::nullopt;
  }
  if (auto why = refused(*filter)) {
    error = error_reply(400, *why);
    return std::nullopt;
  }
  return std::move(*filter);
}

std::optional<ConsoleSource::Found> ConsoleSource::find(const std::string& id, ApiReply& error) {
  auto checked = checked_id(id);
  if (!checked) {
    error = error_reply(malformed_id_status(), checked.error());
    return std::nullopt;
  }
  QuarantineSource* q = records(error);
  if (q == nullptr) return std::nullopt;
  auto r = q->get(*checked);
  if (!r) {
    error = failure(r.error(), r.error_code(), 404);
    return std::nullopt;
  }
  return Found{*q, std::move(*r)};
}

ApiReply ConsoleSource::list_records(const Query& query) {
  ApiReply error;
  auto filter = filter_of(query, true, error);
  QuarantineSource* q = filter ? records(error) : nullptr;
  if (q == nullptr) return error;
  const std::string where = q->where();
  nlohmann::json records = nlohmann::json::array();
  auto total = q->each_counted(*filter, [&](const SourcedRecord& r) { records.push_back(sourced_list_json(r, where)); });
  if (!total) return failure(total.error(), total.error_code());
  ApiReply reply{200, {{"records", std::move(records)}, {"total", *total}, {"offset", filter->offset}}};
  add_left_out(*q, reply);
  return reply;
}

ApiReply ConsoleSource::show_record(const std::string& id) {
  ApiReply error;
  auto found = find(id, error);
  if (!found) return error;
  auto full = found->source.full_json(found->record);
  if (!full) return failure(full.error(), full.error_code(), 500);
  // As show --json: without the payload's head when it cannot be read (or
  // is not the record's). Its first bytes only (payload_head).
  auto head = found->source.payload_head(found->record, kPayloadHeadBytes);
  return {200, head ? shown_record_json(std::move(*full), *head) : std::move(*full)};
}

ApiReply ConsoleSource::record_stats(const Query& query) {
  ApiReply error;
  auto filter = filter_of(query, false, error);
  QuarantineSource* q = filter ? records(error) : nullptr;
  if (q == nullptr) return error;
  std::vector<nlohmann::json> examples;
  auto groups = q->stats(*filter, examples);
  if (!groups) return failure(groups.error(), groups.error_code());
  ApiReply reply{200, {{"groups", fingerprint_stats_json(*groups, examples)}}};
  add_left_out(*q, reply);
  return reply;
}

ApiReply ConsoleSource::discard(const std::string& id, const std::string& body, const std::string& actor) {
  // The body first: a bad request changes nothing, whatever record it names.
  const DiscardReason reason = discard_reason(body);
  if (!reason.reason) return reason.error;
  ApiReply error;
  auto found = find(id, error);
  if (!found) return error;
  if (auto ok = found->source.check_discardable(found->record, "discard"); !ok) return error_reply(409, ok.message());
  auto done = found->source.discard(found->record.id_text(), actor, *reason.reason);
  // A refusal now: a replay took the record in between.
  if (!done) return failure(done.error(), done.error_code(), 409);
  return discarded_reply(found->record.id, done->already, done->was);
}

ApiReply ConsoleSource::allow(const std::string& id, const std::string& body, const std::string& actor) {
  // The body first: a bad request changes nothing, whatever record it names.
  AllowBody read = allow_body(body);
  if (!read.request) return read.error;
  ApiReply error;
  auto found = find(id, error);
  if (!found) return error;
  const store::Review review = read.request->review;
  if (auto ok = found->source.check_discardable(found->record, review == store::Review::kAllow ? "allow" : "revoke");
      !ok) {
    return error_reply(409, ok.message());
  }
  auto done = found->source.review(found->record.id_text(), review, actor, read.request->note);
  if (!done) {
    // A refusal of its status (400), or a replay took it in between (409).
    auto now = found->source.get(found->record.id_text());
    const bool held = now && !found->source.check_discardable(*now, "allow");
    return failure(done.error(), done.error_code(), held ? 409 : 400);
  }
  return reviewed_reply(review, found->record.id, done->already, done->was);
}

ApiReply ConsoleSource::patch(const std::string& id, const std::string& body, const std::string& actor) {
  PatchBody read = patch_body(body);
  if (!read.request) return read.error;
  // The body's mistakes are 400 whatever record it names.
  if (auto ok = check_patch_request(*read.request); !ok) return error_reply(400, ok.message());
  auto checked = checked_id(id);
  if (!checked) return error_reply(malformed_id_status(), checked.error());
  ApiReply error;
  QuarantineSource* q = records(error);
  if (q == nullptr) return error;
  read.request->actor = actor;
  auto revision = q->patch(*checked, std::move(*read.request));
  if (revision) return {200, patched_record_json(*revision, q->id_json(*checked))};
  if (revision.error_code() != ErrorCode::kUsage || !q->can().patches) {
    return failure(revision.error(), revision.error_code());
  }
  // A refusal: which one is read from the records, not from the message.
  auto now = q->get(*checked);
  if (!now) return failure(revision.error(), now.error_code(), 404);
  if (auto held = q->check_discardable(*now, "patch"); !held) {  // a replay holds it: a conflict
    return held.code() == ErrorCode::kUsage ? error_reply(409, revision.error())
                                            : failure(held.message(), held.code());
  }
  return error_reply(400, revision.error());
}

PayloadReply ConsoleSource::preview(const std::string& id, std::size_t max_bytes) {
  ApiReply error;
  auto found = find(id, error);
  if (!found) return {error, {}};
  // Bytes known not to be the ones its record names are not shown as its
  // payload: the page says so (as the download answers 409).
  auto head = found->source.payload_head(found->record, max_bytes);
  if (!head) return {failure(head.error(), head.error_code(), 409), {}};
  return {{}, std::move(*head)};
}

PendingDownload ConsoleSource::find_download(const std::string& id, bool bundle) {
  PendingDownload p;
  auto found = find(id, p.error);
  if (!found || !attach_payload(found->source, found->record, p)) return p;
  const SourcedRecord& r = found->record;
  p.id = r.id_text();  // a number, or digits and a dash: never a path
  p.file_name = "record-" + p.id + (bundle ? ".tar.gz" : ".payload");
  if (bundle) {
    // A bundle's reproduce.sh runs what the record names: only a signed one.
    if (auto ok = found->source.check_runnable(r, trusts_unsigned()); !ok) {
      p.error = error_reply(403, ok.message());
      return p;
    }
    // The record.json of `quarantine export ID --bundle`.
    auto full = found->source.full_json(r);
    if (!full) {
      p.error = failure(full.error(), full.error_code(), 500);
      return p;
    }
    p.bundle = true;
    p.full = std::move(*full);
    p.record = r.record;
  }
  return p;
}

}  // namespace pillbox::serve
