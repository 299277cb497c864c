#include "supervisor/serve/job_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "shared/failure_kind.h"
#include "shared/raise_site.h"

namespace pillbox::serve {
namespace {

using nlohmann::json;

// `body` as a JSON object whose fields are all in `allowed` ("" is {}).
Expected<json> body_object(const std::string& body, const std::set<std::string>& allowed, const std::string& shape) {
  json j = body.empty() ? json::object() : json::parse(body, nullptr, false);  // invalid UTF-8 is a parse error
  if (j.is_discarded() || !j.is_object()) return Error::usage("the body must be a JSON object " + shape);
  for (const auto& [name, value] : j.items()) {
    if (allowed.count(name) == 0) return Error::usage("unknown field '" + name.substr(0, 40) + "'; the body is " + shape);
  }
  return j;
}

// Field `name` of `j`: absent (nullopt), or a whole number in [low, high].
Expected<std::optional<std::int64_t>> whole(const json& j, const std::string& name, std::int64_t low, std::int64_t high) {
  if (!j.contains(name) || j[name].is_null()) return std::optional<std::int64_t>();
  const json& v = j[name];
  if (!v.is_number_integer() || v.get<std::int64_t>() < low || v.get<std::int64_t>() > high) {
    return Error::usage(name + " must be a whole number from " + std::to_string(low) + " to " + std::to_string(high));
  }
  return std::optional<std::int64_t>(v.get<std::int64_t>());
}

// A fingerprint as pillbox makes them ("pb1-" and hex digits), and what an
// operator may type for one: letters, digits and ._:- only, never an option.
bool fingerprint_text(const std::string& fp) {
  return !fp.empty() && fp.size() <= 128 && fp[0] != '-' && std::all_of(fp.begin(), fp.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '-';
  });
}

// The arguments every job ends its verb's with: one JSON result, no bar.
void json_quiet(std::vector<std::string>& args) { args.insert(args.end(), {"--json", "--quiet"}); }

// The body's request started on the board, or the reply that says why not.
ApiReply start_job(JobBoard& board, Expected<JobRequest> request) {
  return request ? board.start(std::move(*request)) : failure_reply(request.error(), request.error_code());
}

using RecordRequest = Expected<JobRequest> (*)(const std::string& id, const std::string& body, const std::string& actor);

ApiReply start_on_record(JobBoard& board, const IdCheck& check_id, const std::string& id_text, const std::string& body,
                         const std::string& actor, RecordRequest request_for) {
  auto id = check_id(id_text);
  if (!id) return error_reply(404, id.error());
  return start_job(board, request_for(*id, body, actor));
}

}  // namespace

Expected<JobRequest> reproduce_request(const std::string& id, const std::string& body, const std::string& actor) {
  const std::string shape = "{\"runs\": 1.." + std::to_string(kMaxWebReproduceRuns) + "} (default 5)";
  auto j = body_object(body, {"runs"}, shape);
  if (!j) return Error{j.error(), j.error_code()};
  auto runs = whole(*j, "runs", 1, kMaxWebReproduceRuns);
  if (!runs) return Error{runs.error(), runs.error_code()};
  JobRequest r{JobKind::kReproduce, {"reproduce", id, "--runs", std::to_string(runs->value_or(5))}, actor, {id}};
  json_quiet(r.args);
  return r;
}

Expected<JobRequest> minimize_request(const std::string& id, const std::string& body, const std::string& actor) {
  const std::string shape = "{\"max_runs\": 1.." + std::to_string(kMaxWebMinimizeRuns) + ", \"max_time\": SECONDS 1.." +
                            std::to_string(kMaxWebMinimizeSeconds) + "} (each optional: 5000 runs, 300 s)";
  auto j = body_object(body, {"max_runs", "max_time"}, shape);
  if (!j) return Error{j.error(), j.error_code()};
  auto runs = whole(*j, "max_runs", 1, kMaxWebMinimizeRuns);
  if (!runs) return Error{runs.error(), runs.error_code()};
  auto seconds = whole(*j, "max_time", 1, kMaxWebMinimizeSeconds);
  if (!seconds) return Error{seconds.error(), seconds.error_code()};
  JobRequest r{JobKind::kMinimize, {"minimize", id}, actor, {id}};
  if (*runs) r.args.insert(r.args.end(), {"--max-runs", std::to_string(**runs)});
  if (*seconds) r.args.insert(r.args.end(), {"--max-time", std::to_string(**seconds) + "s"});
  json_quiet(r.args);
  return r;
}

Expected<JobRequest> replay_request(const std::string& body, const std::string& actor, const IdCheck& check_id) {
  const std::string shape =
      "{\"ids\": [ID...]} or {\"filter\": {\"fingerprint\": FP, \"kind\": K}}, with \"batch\" 1..1000, "
      "\"stop_after\" 1..1000000 and \"max_failure_ratio\" (0 up to 1) optional";
  auto j = body_object(body, {"ids", "filter", "batch", "stop_after", "max_failure_ratio"}, shape);
  if (!j) return Error{j.error(), j.error_code()};
  if (j->contains("ids") == j->contains("filter")) return Error::usage("give ids or a filter, one of them: " + shape);
  JobRequest r{JobKind::kReplay, {"quarantine", "replay"}, actor, {}};
  if (j->contains("ids")) {
    const json& ids = (*j)["ids"];
    if (!ids.is_array() || ids.empty() || ids.size() > kMaxWebReplayIds) {
      return Error::usage("ids must be a list of 1 to " + std::to_string(kMaxWebReplayIds) + " record ids");
    }
    for (const auto& id : ids) {
      const std::string text = id.is_string() ? id.get<std::string>() : id.is_number_integer() ? id.dump() : "";
      auto checked = check_id(text);
      if (!checked) {
        return Error::usage("ids must be record ids, got " +
                            id.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40) + ": " + checked.error());
      }
      r.records.push_back(*checked);
      r.args.push_back(*checked);  // checked: digits (and a dash), never an option
    }
  } else {
    const json& f = (*j)["filter"];
    const char* which = "the filter is {\"fingerprint\": FP, \"kind\": K, \"raise_site\": S}, one or more (what "
                        "pillbox quarantine replay selects by)";
    if (!f.is_object() || f.empty()) return Error::usage(which);
    for (const auto& [name, value] : f.items()) {
      if (name != "fingerprint" && name != "kind" && name != "raise_site") {
        return Error::usage(std::string(which) + "; not '" + name.substr(0, 40) + "'");
      }
      if (!value.is_string()) return Error::usage(name + " must be text");
    }
    if (f.contains("raise_site")) {
      const std::string site = f["raise_site"].get<std::string>();
      if (!is_raise_site_id(site)) return Error::usage("raise_site must be a raise site's id, rs- and 16 hex digits");
      r.args.push_back("--raise-site=" + site);
    }
    if (f.contains("fingerprint")) {
      const std::string fp = f["fingerprint"].get<std::string>();
      if (!fingerprint_text(fp)) return Error::usage("not a fingerprint: letters, digits and ._:- (at most 128), like pb1-...");
      r.args.push_back("--fingerprint=" + fp);
    }
    if (f.contains("kind")) {
      const std::string kind = f["kind"].get<std::string>();
      if (!kind_from_string(kind)) return Error::usage("unknown kind '" + kind.substr(0, 40) + "'");
      r.args.push_back("--kind=" + kind);
    }
  }
  auto batch = whole(*j, "batch", 1, 1000);
  if (!batch) return Error{batch.error(), batch.error_code()};
  if (*batch) r.args.insert(r.args.end(), {"--batch", std::to_string(**batch)});
  auto stop_after = whole(*j, "stop_after", 1, 1'000'000);
  if (!stop_after) return Error{stop_after.error(), stop_after.error_code()};
  if (*stop_after) r.args.insert(r.args.end(), {"--stop-after", std::to_string(**stop_after)});
  if (j->contains("max_failure_ratio") && !(*j)["max_failure_ratio"].is_null()) {
    const json& v = (*j)["max_failure_ratio"];
    if (!v.is_number() || v.get<double>() < 0.0 || v.get<double>() >= 1.0) {
      return Error::usage("max_failure_ratio must be a number from 0 up to (not including) 1, e.g. 0.2");
    }
    r.args.insert(r.args.end(), {"--max-failure-ratio", json(v.get<double>()).dump()});
  }
  json_quiet(r.args);
  return r;
}

ApiReply start_reproduce(JobBoard& board, const IdCheck& check_id, const std::string& id_text, const std::string& body,
                         const std::string& actor) {
  return start_on_record(board, check_id, id_text, body, actor, reproduce_request);
}

ApiReply start_minimize(JobBoard& board, const IdCheck& check_id, const std::string& id_text, const std::string& body,
                        const std::string& actor) {
  return start_on_record(board, check_id, id_text, body, actor, minimize_request);
}

ApiReply start_replay(JobBoard& board, const IdCheck& check_id, const std::string& body, const std::string& actor) {
  return start_job(board, replay_request(body, actor, check_id));
}

}  // namespace pillbox::serve
