#include "supervisor/serve/fleet_console_source.h"

#include <algorithm>
#include <set>

#include "shared/failure_kind.h"
#include "supervisor/broker/fleet_discard.h"
#include "supervisor/broker/fleet_views_json.h"
#include "supervisor/metrics/metrics_text.h"
#include "supervisor/metrics/store_metrics.h"
#include "supervisor/ops/quarantine_views_json.h"

namespace pillbox::serve {
namespace {

// A scrape is answered from the last count while it is younger than this,
// or than kScanTimes its scan's duration (timed from the scan's end):
// counting reads every dead letter, and anyone who reaches /metrics may ask
// as often as they like.
constexpr std::chrono::seconds kMetricsFresh{1};
constexpr int kScanTimes = 4;

// The store's filters (records_filter), less `source`: every record of the
// fleet comes from a worker. Nothing, with the 400 in `error`, when bad.
std::optional<store::ListFilter> fleet_filter(const Query& query, bool paging, ApiReply& error) {
  auto filter = records_filter(query, paging);
  if (!filter) {
    error = error_reply(400, filter.error());
    return std::nullopt;
  }
  if (filter->source) {
    error = error_reply(400, "source does not apply here: every record of the fleet comes from a worker");
    return std::nullopt;
  }
  return std::move(*filter);
}

}  // namespace

Expected<std::unique_ptr<FleetSource>> FleetSource::open(const broker::RedisAddress& address,
                                                         const std::string& stream, FleetTrust trust) {
  auto fleet = broker::FleetQuarantine::open(address, stream);
  if (!fleet) return Error{fleet.error(), fleet.error_code()};
  return std::unique_ptr<FleetSource>(new FleetSource(address, stream, std::move(*fleet), std::move(trust)));
}

FleetSource::FleetSource(broker::RedisAddress address, std::string stream, broker::FleetQuarantine fleet,
                         FleetTrust trust)
    : address_(std::move(address)), stream_(std::move(stream)), trust_(std::move(trust)), fleet_(std::move(fleet)) {
  fleet_->use_key(trust_.key);
}

std::string FleetSource::location() const { return broker::fleet_location(address_, broker::fleet_keys(stream_)); }

std::vector<std::string> FleetSource::cli_source_args() const {
  // The jobs (reproduce, replay) check signatures as the console does.
  std::vector<std::string> args = {"--redis", address_.describe(), "--stream", stream_};
  if (!trust_.key_arg.empty()) args.insert(args.end(), {"--fleet-key", trust_.key_arg});
  if (trust_.trust_unsigned) args.push_back("--trust-unsigned");
  return args;
}

ApiReply FleetSource::unreachable(const std::string& detail) const {
  // The connection's errors name the server too: said once.
  const std::string where = address_.describe();
  std::string why = detail;
  for (const std::string& prefix : {"cannot reach Redis at " + where + ": ", "Redis at " + where + ": "}) {
    if (why.rfind(prefix, 0) == 0) {
      why = why.substr(prefix.size());
      break;
    }
  }
  return error_reply(503, "Redis at " + where + " cannot be reached: " + why +
                              "; the console answers again once it is back");
}

broker::FleetQuarantine* FleetSource::fleet(ApiReply& error) {
  // A connection Redis dropped since the last request (a restart) is found
  // by a PING, not by this request failing: it goes on a fresh one.
  if (fleet_ && !fleet_->redis().broken() && fleet_->redis().command({"PING"})) return &*fleet_;
  fleet_.reset();
  auto redis = broker::RedisConnection::open(address_);
  if (!redis) {
    error = unreachable(redis.error());
    return nullptr;
  }
  auto opened = broker::FleetQuarantine::open(std::move(*redis), stream_);
  if (!opened) {
    // Redis answered: a key of another type is said as it is (500), not as
    // Redis being out of reach.
    error = error_reply(500, opened.error());
    return nullptr;
  }
  fleet_.emplace(std::move(*opened));
  fleet_->use_key(trust_.key);
  return &*fleet_;
}

ApiReply FleetSource::failure(const std::string& message, ErrorCode code, int usage_status) {
  if (fleet_ && (fleet_->redis().broken() || fleet_->redis().busy())) {
    if (fleet_->redis().broken()) fleet_.reset();  // connected again by the next request
    return unreachable(message);
  }
  return error_reply(code == ErrorCode::kUsage ? usage_status : 500, message);
}

std::optional<broker::FleetRecord> FleetSource::find(const std::string& id, ApiReply& error) {
  auto checked = broker::parse_fleet_id(id);
  if (!checked) {
    error = error_reply(400, checked.error());
    return std::nullopt;
  }
  broker::FleetQuarantine* q = fleet(error);
  if (q == nullptr) return std::nullopt;
  auto r = q->get(*checked);
  if (!r) {
    error = failure(r.error(), r.error_code(), 404);
    return std::nullopt;
  }
  return std::move(*r);
}

ApiReply FleetSource::list_records(const Query& query) {
  ApiReply error;
  auto filter = fleet_filter(query, true, error);
  broker::FleetQuarantine* q = filter ? fleet(error) : nullptr;
  if (q == nullptr) return error;
  // One pass counts and collects (a second scan to count doubled the time
  // under the server's lock); the listing reads no payload (each()).
  store::ListFilter all = *filter;
  all.limit = -1;
  all.offset = 0;
  nlohmann::json records = nlohmann::json::array();
  std::int64_t total = 0;
  const Status each = q->each(all, [&](const broker::FleetRecord& r) {
    if (total >= filter->offset && (filter->limit < 0 || total < filter->offset + filter->limit)) {
      records.push_back(broker::fleet_list_json(*q, r));
    }
    ++total;
    return true;
  });
  if (!each) return failure(each.message(), each.code());
  return {200, {{"records", std::move(records)}, {"total", total}, {"offset", filter->offset}}};
}

ApiReply FleetSource::show_record(const std::string& id) {
  ApiReply error;
  auto r = find(id, error);
  if (!r) return error;
  nlohmann::json full = broker::fleet_full_record_json(*fleet_, *r);
  // As show --json --redis: without the payload's head when it does not match its hash.
  auto payload = broker::checked_payload(*r);
  return {200, payload ? shown_record_json(std::move(full), *payload) : std::move(full)};
}

ApiReply FleetSource::record_stats(const Query& query) {
  ApiReply error;
  auto filter = fleet_filter(query, false, error);
  broker::FleetQuarantine* q = filter ? fleet(error) : nullptr;
  if (q == nullptr) return error;
  std::vector<std::string> examples;
  auto groups = q->stats(*filter, examples);
  if (!groups) return failure(groups.error(), groups.error_code());
  return {200, {{"groups", fingerprint_stats_json(*groups, std::vector<nlohmann::json>(examples.begin(), examples.end()))}}};
}

ApiReply FleetSource::list_tasks(const Query&) {
  return error_reply(404, "the fleet's quarantine has no tasks here: pillbox worker keeps no ledger; each worker's "
                          "counts are at its --metrics address (pillbox worker --metrics HOST:PORT)");
}

ApiReply FleetSource::live_runs() {
  return error_reply(404, "no run is attached to the fleet's quarantine: the workers of stream " + stream_ +
                              " show what they run at their --metrics address (pillbox worker --metrics HOST:PORT)");
}

ApiReply FleetSource::discard(const std::string& id, const std::string& body, const std::string& actor) {
  // The body first: a bad request changes nothing, whatever record it names.
  const DiscardReason reason = discard_reason(body);
  if (!reason.reason) return reason.error;
  ApiReply error;
  auto r = find(id, error);
  if (!r) return error;
  if (auto ok = broker::check_fleet_discardable(*r); !ok) return error_reply(409, ok.message());
  auto done = broker::discard_fleet_record(*fleet_, r->id, actor, *reason.reason);
  // A refusal now: a replay took the record's lock in between.
  if (!done) return failure(done.error(), done.error_code(), 409);
  return discarded_reply(r->id, done->already, done->was);
}

ApiReply FleetSource::patch(const std::string& id, const std::string&, const std::string&) {
  if (auto checked = broker::parse_fleet_id(id); !checked) return error_reply(400, checked.error());
  return error_reply(400, broker::store_only_verb("patch"));
}

PendingDownload FleetSource::find_download(const std::string& id, bool bundle) {
  PendingDownload p;
  auto r = find(id, p.error);
  if (!r) return p;
  auto bytes = broker::checked_payload(*r);
  // Not the bytes its record names: a conflict to say, not a server error.
  if (!bytes) {
    p.error = error_reply(409, bytes.error());
    return p;
  }
  // A bundle's reproduce.sh runs what the record names: only a signed one.
  if (bundle) {
    if (auto ok = broker::check_signed(*r, trust_.trust_unsigned); !ok) {
      p.error = error_reply(403, ok.message());
      return p;
    }
  }
  p.id = r->id;  // digits and a dash: never a path
  p.file_name = "record-" + r->id + (bundle ? ".tar.gz" : ".payload");
  p.bytes = std::move(*bytes);
  if (bundle) {
    // The record.json of `quarantine export ID --bundle --redis`.
    p.bundle = true;
    p.full = broker::fleet_full_record_json(*fleet_, *r);
    p.record = std::move(r->record);
  }
  return p;
}

PayloadReply FleetSource::preview(const std::string& id, std::size_t max_bytes) {
  ApiReply error;
  auto r = find(id, error);
  if (!r) return {error, {}, {}};
  // Bytes that are not the ones its record names are not shown as its
  // payload: the page says so (as the download answers 409).
  if (auto checked = broker::checked_payload(*r); !checked) return {error_reply(409, checked.error()), {}, {}};
  return {{}, r->payload.substr(0, max_bytes), ""};
}

std::string FleetSource::metrics() {
  std::lock_guard<std::mutex> hold(metrics_lock_);
  const auto start = std::chrono::steady_clock::now();
  if (!metrics_text_.empty() && start - metrics_at_ < std::max<std::chrono::steady_clock::duration>(
                                                          kMetricsFresh, kScanTimes * metrics_scan_)) {
    return metrics_text_;
  }
  // A connection of its own: the pages' one is the server's lock's.
  metrics::RecordCounts records;
  std::set<std::string> fingerprints;
  bool up = false;
  if (auto q = broker::FleetQuarantine::open(address_, stream_)) {
    up = q->each({}, [&](const broker::FleetRecord& r) {
           // Anyone who can write to Redis writes kinds: an unknown one is
           // "other", never a new label series per forged value.
           const std::string& kind = r.record.entry.kind;
           ++records[{std::string(store::to_string(r.record.status)), kind_from_string(kind) ? kind : "other"}];
           fingerprints.insert(r.record.entry.fingerprint);
           return true;
         }).is_ok();
  }
  metrics::MetricsText text;
  text.family("pillbox_fleet_up", "1 when this answer has the fleet's quarantine in it, 0 when Redis cannot be read.",
              metrics::MetricType::kGauge);
  text.sample("pillbox_fleet_up", {}, up ? 1 : 0);
  if (up) metrics::write_quarantine_families(text, records, static_cast<std::int64_t>(fingerprints.size()));
  metrics_text_ = text.text();
  metrics_at_ = std::chrono::steady_clock::now();
  metrics_scan_ = metrics_at_ - start;
  return metrics_text_;
}

}  // namespace pillbox::serve
