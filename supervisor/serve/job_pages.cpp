#include "supervisor/serve/job_pages.h"

#include <ctime>

#include "supervisor/serve/html_text.h"
#include "supervisor/store/record_status.h"

namespace pillbox::serve {
namespace {

using nlohmann::json;

// Unix milliseconds as a UTC time, like the store's ("-" for null).
std::string time_text(const json& ms) {
  if (!ms.is_number_integer()) return "-";
  const std::time_t t = static_cast<std::time_t>(ms.get<std::int64_t>() / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "12/50  2 crash, 1 resolved  note": a progress line's object, escaped.
std::string progress_text(const json& p) {
  if (!p.is_object()) return "-";
  std::string out = field_html(p, "label") + ": " + field_html(p, "done");
  if (p.value("total", json(0)) != json(0)) out += "/" + field_html(p, "total");
  if (p.contains("counts") && p["counts"].is_object()) {
    std::string counts;
    for (const auto& [what, n] : p["counts"].items()) counts += (counts.empty() ? "" : ", ") + value_html(n) + " " + html_escape(what);
    if (!counts.empty()) out += "  " + counts;
  }
  if (p.contains("note") && p["note"].is_string() && !p["note"].get<std::string>().empty()) out += "  " + field_html(p, "note");
  return out;
}

std::string records_html(const json& records) {
  std::string out;
  if (!records.is_array()) return "-";
  for (const auto& id : records) {
    const std::string t = value_text(id);
    out += (out.empty() ? "" : " ") + std::string("<a href=\"/records/") + url_encode(t) + "\">" + html_escape(t) + "</a>";
  }
  return out.empty() ? "-" : out;
}

std::string command_text(const json& command) {
  std::string out;
  if (!command.is_array()) return "-";
  for (const auto& a : command) out += (out.empty() ? "" : " ") + value_text(a);
  return html_escape(out);
}

// The access token's field, read and kept by console.js (sessionStorage).
const char* kTokenInput =
    "<label>access token <input class=\"job-token\" type=\"password\" autocomplete=\"off\" size=\"16\" "
    "placeholder=\"STORE/serve.token\"></label>\n";

}  // namespace

Page jobs_page(const JobBoard& board) {
  const ApiReply reply = board.list();
  std::string body = "<h1>Jobs</h1>\n<p class=\"note\">Reproduce, minimize and replay started here, each a "
                     "<code>pillbox</code> command run by the console (at most 2 at once). They are kept until the "
                     "console stops; what they did is in the records' audit trails.</p>\n";
  body += "<table class=\"jobs\"><thead><tr><th>job</th><th>kind</th><th>records</th><th>state</th><th>started</th>"
          "<th>ended</th><th>progress</th><th>actor</th></tr></thead><tbody>\n";
  for (const auto& j : reply.body["jobs"]) {
    const std::string id = value_text(j["id"]);
    body += "<tr><td><a href=\"/jobs/" + url_encode(id) + "\">" + html_escape(id) + "</a></td><td>" + field_html(j, "kind") +
            "</td><td>" + records_html(j["records"]) + "</td><td><span class=\"status job-" + field_html(j, "state") +
            "\">" + field_html(j, "state") + "</span></td><td>" + time_text(j["started_at_ms"]) + "</td><td>" +
            time_text(j["ended_at_ms"]) + "</td><td>" + progress_text(j["progress"]) + "</td><td class=\"actor\">" +
            field_html(j, "actor") + "</td></tr>\n";
  }
  body += "</tbody></table>\n";
  if (reply.body["jobs"].empty()) body += "<p class=\"paging\">no jobs since the console started</p>\n";
  return {200, page_layout("jobs", "/jobs", body)};
}

Page job_page(const JobBoard& board, const std::string& id_text) {
  const ApiReply reply = board.show(id_text);
  if (reply.status != 200) return error_page(reply.status, value_text(reply.body["error"]));
  const json& j = reply.body["job"];
  const std::string id = value_text(j["id"]);
  const std::string state = value_text(j["state"]);
  // data-source and data-state: console.js refreshes the page while it runs.
  std::string body = "<h1>Job " + html_escape(id) + ": " + field_html(j, "kind") + " <span id=\"job-state\" class=\"status "
                     "job-" + html_escape(state) + "\">" + html_escape(state) + "</span></h1>\n";
  body += "<dl class=\"record\" id=\"job\" data-source=\"/api/jobs/" + html_escape(url_encode(id)) +
          "\" data-state=\"" + html_escape(state) + "\">\n";
  auto row = [&](const std::string& name, const std::string& html) { body += "<dt>" + name + "</dt><dd>" + html + "</dd>\n"; };
  row("command", "<code>" + command_text(j["command"]) + "</code>");
  row("records", records_html(j["records"]));
  row("actor", field_html(j, "actor"));
  row("started", time_text(j["started_at_ms"]));
  row("ended", "<span id=\"job-ended\">" + time_text(j["ended_at_ms"]) + "</span>");
  std::string exit = "-";
  if (!j["exit_code"].is_null()) exit = "exit code " + value_html(j["exit_code"]);
  if (!j["signal"].is_null()) exit = "signal " + value_html(j["signal"]);
  row("exit", "<span id=\"job-exit\">" + exit + "</span>");
  row("progress", "<span id=\"job-progress\">" + progress_text(j["progress"]) + "</span>");
  if (!j["error"].is_null()) row("error", "<span class=\"error\">" + value_html(j["error"]) + "</span>");
  body += "</dl>\n";
  if (state == "running") {
    body += "<form id=\"job-stop\" class=\"action job-form\" method=\"post\" data-action=\"/api/jobs/" +
            html_escape(url_encode(id)) + "/stop\">\n" + kTokenInput +
            "<button type=\"submit\">Stop</button>\n<output class=\"job-result\"></output>\n</form>\n"
            "<p class=\"note\">Stop sends SIGTERM: a replay gives back the records it holds, a minimize keeps its "
            "progress, a reproduce records nothing.</p>\n";
  }
  body += "<h2>Result</h2>\n";
  if (j["result"].is_null()) {
    body += "<p class=\"note\" id=\"job-no-result\">" +
            std::string(state == "running" ? "not yet: the command's --json comes when it ends" : "none") + "</p>\n";
  } else {
    body += "<pre class=\"result\">" + html_escape(j["result"].dump(2, ' ', false, json::error_handler_t::replace)) +
            "</pre>\n";
  }
  body += "<h2>stderr (the last 16 KiB)</h2>\n<pre class=\"stderr\" id=\"job-stderr\">" + field_html(j, "stderr_tail") +
          "</pre>\n";
  return {200, page_layout("job " + id, "/jobs", body)};
}

std::string record_actions_html(const std::string& id, const std::string& status) {
  // An open record no replay holds: quarantined, allowed or failed-again.
  const auto known = store::record_status_from_string(status);
  if (!known || !store::is_open(*known) || *known == store::RecordStatus::kReplaying) return "";
  const std::string enc = html_escape(url_encode(id));
  const std::string minimize =
      "<form class=\"action job-form\" method=\"post\" data-action=\"/api/records/" + enc + "/minimize\">\n"
      "<label>max runs <input name=\"max_runs\" type=\"number\" min=\"1\" max=\"100000\" value=\"5000\" "
      "data-number></label>\n<label>max seconds <input name=\"max_time\" type=\"number\" min=\"1\" "
      "max=\"3600\" value=\"300\" data-number></label>\n"
      "<button type=\"submit\">Minimize</button>\n<output class=\"job-result\"></output>\n</form>\n";
  return "<h2>Actions</h2>\n"
         "<form class=\"action job-form\" method=\"post\" data-action=\"/api/records/" + enc + "/reproduce\">\n"
         "<label>runs <input name=\"runs\" type=\"number\" min=\"1\" max=\"100\" value=\"5\" data-number></label>\n"
         "<button type=\"submit\">Reproduce</button>\n<output class=\"job-result\"></output>\n</form>\n" + minimize +
         "<form class=\"action job-form\" method=\"post\" data-action=\"/api/replay\" data-ids=\"" + html_escape(id) +
         "\">\n<button type=\"submit\">Replay this record</button>\n<output class=\"job-result\"></output>\n</form>\n" +
         kTokenInput +
         "<p class=\"note\">Each runs as a job (<a href=\"/jobs\">Jobs</a>): <code>pillbox reproduce</code>, " +
         "<code>minimize</code> or <code>quarantine replay</code> on this quarantine, audited as "
         "web.</p>\n";
}

std::string replay_filter_form_html(const std::string& fingerprint, const std::string& kind,
                                    const std::string& raise_site) {
  if (fingerprint.empty() && kind.empty() && raise_site.empty()) return "";
  std::string hidden;
  if (!raise_site.empty()) hidden += "<input type=\"hidden\" name=\"raise_site\" value=\"" + html_escape(raise_site) + "\">\n";
  if (!fingerprint.empty()) hidden += "<input type=\"hidden\" name=\"fingerprint\" value=\"" + html_escape(fingerprint) + "\">\n";
  if (!kind.empty()) hidden += "<input type=\"hidden\" name=\"kind\" value=\"" + html_escape(kind) + "\">\n";
  return "<form class=\"action job-form\" method=\"post\" data-action=\"/api/replay\" data-filter>\n" + hidden +
         "<label>batch <input name=\"batch\" type=\"number\" min=\"1\" max=\"1000\" value=\"10\" data-number></label>\n"
         "<label>stop after <input name=\"stop_after\" type=\"number\" min=\"1\" max=\"1000000\" placeholder=\"K\" "
         "data-number></label>\n" + std::string(kTokenInput) +
         "<button type=\"submit\">Replay the records of this filter</button>\n<output class=\"job-result\"></output>\n</form>\n<p class=\"note\">Replays the open records of this "
         "fingerprint, kind and raise site (the other filters do not narrow a replay), oldest first; stop after K that fail "
         "again with one fingerprint.</p>\n";
}

}  // namespace pillbox::serve
