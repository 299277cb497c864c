#include "supervisor/serve/console_pages.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "shared/failure_kind.h"
#include "supervisor/serve/day_chart.h"
#include "supervisor/serve/html_text.h"
#include "supervisor/serve/job_pages.h"
#include "supervisor/store/record_status.h"
#include "supervisor/store/task_view.h"

namespace pillbox::serve {
namespace {

using nlohmann::json;

// A fleet's record whose state or lock cannot be read (fleet_quarantine_source.cpp's
// state_error): in a list, a short mark with the reason as its title.
std::string state_error_note(const json& r, bool short_form) {
  if (!r.contains("state_error")) return "";
  if (!short_form) return "<span class=\"error\">" + field_html(r, "state_error") + "</span>";
  return " <span class=\"error\" title=\"" + field_html(r, "state_error") + "\">state unreadable</span>";
}
// A fleet's record without a valid signature (fleet_key.h): never run by
// the console's jobs or bundle unless serve was given --trust-unsigned.
std::string signature_note(const json& r, bool short_form) {
  if (!r.contains("signature") || !r["signature"].is_string() || r["signature"] == "valid") return "";
  const std::string sig = r["signature"].get<std::string>();
  const std::string why = sig == "missing"     ? "unsigned: anyone who can write to the fleet's dead letters can write one"
                          : sig == "bad"       ? "the signature does not match the fleet key"
                                               : "not checked: serve has no --fleet-key";
  if (!short_form) return "<span class=\"error\">" + html_escape(sig) + ": " + html_escape(why) + "</span>";
  const std::string mark = sig == "missing" ? "unsigned" : sig == "bad" ? "bad signature" : "unchecked";
  return " <span class=\"error\" title=\"" + html_escape(why) + "\">" + mark + "</span>";
}

// What only RabbitMQ says of a dead letter (show --json's "amqp", as `show`
// prints it): where it came from, the broker's own dead-lettering, x-death.
// Every value is the dead letter's claim.
std::string rabbitmq_html(const json& a) {
  std::string out = "offset " + field_html(a, "offset") + " of the queue's .dlq, from queue " + field_html(a, "queue") +
                    ", message id <code>" + field_html(a, "message_id") + "</code>";
  if (a.contains("deliveries")) out += ", " + field_html(a, "deliveries") + " deliveries";
  if (a.contains("first_death_reason")) {
    out += "<br>dead-lettered by RabbitMQ itself: reason " + field_html(a, "first_death_reason") + ", from queue " +
           field_html(a, "first_death_queue");
  }
  const json deaths = a.contains("x_death") && a["x_death"].is_object() ? a["x_death"].value("deaths", json()) : json();
  if (deaths.is_array() && !deaths.empty()) {
    out += "<br>x-death (RabbitMQ's history of it before the dead letter):<ul class=\"deaths\">";
    for (const auto& d : deaths) {
      if (d.is_object()) out += "<li>" + field_html(d, "reason") + " from " + field_html(d, "queue") + ", count " + field_html(d, "count") + "</li>";
    }
    out += "</ul>";
  }
  if (a.contains("unreadable")) out += "<br><span class=\"error\">unreadable: " + field_html(a, "unreadable") + "</span>";
  return out;
}

// What a listing left out and why (a reply's "left_out"), or "".
std::string left_out_note(const json& reply) {
  if (!reply.contains("left_out")) return "";
  return "<p class=\"note left-out\">" + field_html(reply, "left_out") + "</p>\n";
}

Page error_reply_page(const ApiReply& reply) { return error_page(reply.status, value_text(reply.body["error"])); }

// A page of what `source` does not have (the fleet's tasks and runs): its
// title and the reply's explanation, with the reply's status.
Page none_here(ConsoleSource& source, const std::string& title, const std::string& active, const ApiReply& reply) {
  return {reply.status, page_layout(title, active, "<h1>" + html_escape(title) + "</h1>\n<p class=\"note\">" +
                                                       value_html(reply.body["error"]) + "</p>\n", source.location())};
}

// <select name=NAME> of `options`, "any" first, `current` selected.
std::string select(const std::string& name, const std::vector<std::string>& options, const std::string& current) {
  std::string out = "<label>" + name + " <select name=\"" + name + "\"><option value=\"\">any</option>";
  for (const auto& o : options) {
    out += "<option" + std::string(o == current ? " selected" : "") + ">" + html_escape(o) + "</option>";
  }
  return out + "</select></label>\n";
}

std::string input(const std::string& name, const std::string& current) {
  return "<label>" + name + " <input name=\"" + name + "\" value=\"" + html_escape(current) + "\" size=\"18\"></label>\n";
}

std::string query_value(const Query& query, const std::string& name) {
  const auto it = query.find(name);
  return it == query.end() ? "" : it->second;
}

// `query` with `name` set to `value` (dropped when empty), as "?a=b&c=d".
std::string query_with(Query query, const std::string& name, const std::string& value) {
  query.erase(name);
  if (!value.empty()) query.emplace(name, value);
  std::string out;
  for (const auto& [k, v] : query) {
    if (v.empty()) continue;
    out += (out.empty() ? "?" : "&") + url_encode(k) + "=" + url_encode(v);
  }
  return out;
}

std::string record_link(const json& id) {
  const std::string t = value_text(id);
  return "<a href=\"/records/" + url_encode(t) + "\">" + html_escape(t) + "</a>";
}

std::string fingerprint_link(const json& fp) {
  const std::string t = value_text(fp);
  return "<a class=\"fp\" href=\"/?fingerprint=" + url_encode(t) + "\">" + html_escape(t) + "</a>";
}

std::vector<std::string> kind_names() {
  std::vector<std::string> out;
  for (Kind k : kAllKinds) out.emplace_back(to_string(k));
  return out;
}

std::vector<std::string> status_names() {
  std::vector<std::string> out;
  for (store::RecordStatus s : store::kAllRecordStatuses) out.emplace_back(to_string(s));
  return out;
}

}  // namespace

// `where`: the quarantine shown (ConsoleSource::location), in the header.
std::string page_layout(const std::string& title, const std::string& active, const std::string& body,
                        const std::string& where) {
  std::string nav;
  for (const auto& [href, name] : {std::pair{"/", "Quarantine"}, {"/groups", "Fingerprints"}, {"/tasks", "Tasks"}, {"/runs", "Runs"},
                                    {"/jobs", "Jobs"}}) {
    nav += std::string("<a href=\"") + href + "\"" + (active == href ? " class=\"active\"" : "") + ">" + name + "</a>";
  }
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<title>" + html_escape(title) + " · pillbox</title>"
         "<link rel=\"stylesheet\" href=\"/static/console.css\"></head>\n"
         "<body><header><span class=\"brand\">pillbox</span><nav>" + nav + "</nav>" +
         (where.empty() ? "" : "<span class=\"where\">" + html_escape(where) + "</span>") + "</header>\n<main>\n" + body +
         "</main>\n<script src=\"/static/console.js\"></script></body></html>\n";
}
std::string value_text(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}
std::string value_html(const json& v) { return html_escape(value_text(v)); }
std::string field_html(const json& object, const char* name) {
  return object.is_object() && object.contains(name) ? value_html(object[name]) : "-";
}

Page error_page(int status, const std::string& message) {
  return {status, page_layout("error", "", "<h1>Error " + std::to_string(status) + "</h1>\n<p class=\"error\">" +
                                               html_escape(message) +
                                               "</p>\n<p><a href=\"/\">the quarantine</a></p>\n")};
}

Page list_page(ConsoleSource& source, const Query& given) {
  Query query = given;
  if (query_value(query, "limit").empty()) {
    query.erase("limit");
    query.emplace("limit", std::to_string(kListPageSize));
  }
  const ApiReply reply = source.list_records(query);
  if (reply.status != 200) return error_reply_page(reply);
  const auto& records = reply.body["records"];
  const std::int64_t total = reply.body["total"].get<std::int64_t>();
  const std::int64_t offset = reply.body["offset"].get<std::int64_t>();
  const std::int64_t limit = std::max<std::int64_t>(1, std::stoll(query_value(query, "limit")));

  std::string body = "<h1>Quarantine</h1>\n<form class=\"filters\" method=\"get\" action=\"/\">\n";
  body += select("status", status_names(), query_value(query, "status"));
  body += select("kind", kind_names(), query_value(query, "kind"));
  body += input("fingerprint", query_value(query, "fingerprint"));
  body += input("handler", query_value(query, "handler"));
  body += input("key", query_value(query, "key"));
  body += input("raise_site", query_value(query, "raise_site"));
  body += "<button type=\"submit\">Filter</button> <a href=\"/\">clear</a>\n</form>\n";
  body += replay_filter_form_html(query_value(query, "fingerprint"), query_value(query, "kind"),
                                  query_value(query, "raise_site"));
  body += "<table class=\"records\"><thead><tr><th>ID</th><th>created</th><th>status</th><th>kind</th>"
          "<th>fingerprint</th><th>handler</th><th>key</th><th>bytes</th></tr></thead><tbody>\n";
  for (const auto& r : records) {
    body += "<tr><td>" + record_link(r["id"]) + "</td><td>" + field_html(r, "created_at") + "</td><td><span class=\"status " +
            field_html(r, "status") + "\">" + field_html(r, "status") + "</span>" + state_error_note(r, true) + signature_note(r, true) + "</td><td>" +
            field_html(r, "kind") + "</td><td>" +
            fingerprint_link(r["fingerprint"]) + "</td><td>" + field_html(r, "handler") + "</td><td class=\"key\">" +
            field_html(r, "key") + "</td><td class=\"num\">" + field_html(r, "payload_size") + "</td></tr>\n";
  }
  body += "</tbody></table>\n";
  body += left_out_note(reply.body);
  const std::int64_t shown = static_cast<std::int64_t>(records.size());
  body += "<p class=\"paging\">";
  if (shown == 0) {
    body += "no records" + std::string(total > 0 ? " on this page" : "") + " (" + std::to_string(total) + " in all)";
  } else {
    body += "records " + std::to_string(offset + 1) + " to " + std::to_string(offset + shown) + " of " +
            std::to_string(total);
  }
  if (offset > 0) {
    body += " · <a rel=\"prev\" href=\"/" +
            html_escape(query_with(query, "offset", std::to_string(std::max<std::int64_t>(0, offset - limit)))) +
            "\">newer</a>";
  }
  if (offset + shown < total) {
    body += " · <a rel=\"next\" href=\"/" + html_escape(query_with(query, "offset", std::to_string(offset + shown))) +
            "\">older</a>";
  }
  body += "</p>\n";
  return {200, page_layout("quarantine", "/", body, source.location())};
}

Page groups_page(ConsoleSource& source, const Query& query) {
  const ApiReply reply = source.record_stats(query);
  if (reply.status != 200) return error_reply_page(reply);
  std::string body = "<h1>Fingerprints</h1>\n<p>Records grouped by the bug that made them (<code>pillbox quarantine "
                     "stats</code>), most records first; the bars are each group's records created on each of the last 14 days "
                     "(UTC), today last.</p>\n";
  body += "<table class=\"groups\"><thead><tr><th>fingerprint</th><th>kind</th><th>records</th><th>open</th>"
          "<th>repeats</th><th>first seen</th><th>last seen</th><th>last 14 days</th><th>by status</th><th>example</th>"
          "<th>crash state</th><th>message</th>"
          "</tr></thead><tbody>\n";
  for (const auto& g : reply.body["groups"]) {
    std::string statuses;
    for (const auto& [status, n] : g["by_status"].items()) {
      if (n.get<std::int64_t>() > 0) statuses += (statuses.empty() ? "" : ", ") + value_html(n) + " " + html_escape(status);
    }
    // The example's crash state, innermost first: groups of one exception
    // raised through other callers are told apart at a glance.
    std::string state;
    if (g.contains("crash_state") && g["crash_state"].is_array()) {
      for (const auto& frame : g["crash_state"]) state += (state.empty() ? "" : " &lt; ") + value_html(frame);
    }
    body += "<tr><td>" + fingerprint_link(g["fingerprint"]) + "</td><td>" + field_html(g, "kind") + "</td><td class=\"num\">" +
            field_html(g, "records") + "</td><td class=\"num\">" + field_html(g, "open") + "</td><td class=\"num\">" +
            field_html(g, "repeats") + "</td><td>" + field_html(g, "first_seen") + "</td><td>" + field_html(g, "last_seen") +
            "</td><td>" + (g.contains("by_day") ? day_bars_svg(g["by_day"]) : "") + "</td><td>" + statuses + "</td><td>" + record_link(g["example_id"]) + "</td><td class=\"state\">" + state +
            "</td><td class=\"message\">" + field_html(g, "message") + "</td></tr>\n";
  }
  body += "</tbody></table>\n";
  body += left_out_note(reply.body);
  // One bug met through several callers: the groups of one raise site
  // (shared/raise_site.h), each site a link to its records.
  std::map<std::string, std::vector<const json*>> by_site;  // by id
  for (const auto& g : reply.body["groups"]) {
    if (g.contains("raise_site_id") && g["raise_site_id"].is_string() && g.contains("raise_site") &&
        g["raise_site"].is_string() && g.value("raise_site_groups", 1) >= 2) {
      by_site[g["raise_site_id"].get<std::string>()].push_back(&g);
    }
  }
  if (!by_site.empty()) {
    body += "<h2>Same raise site</h2>\n<p class=\"note\">Groups raised at one place (the exception and its innermost "
            "frame, or a crash's innermost frame) but reached through other callers: one bug, most likely. "
            "Select them as one with <code>--raise-site ID</code>.</p>\n"
            "<table class=\"sites\"><thead><tr><th>id</th><th>raise site</th><th>groups</th><th>records</th>"
            "<th>open</th><th>fingerprints</th></tr></thead><tbody>\n";
    for (const auto& [id, members] : by_site) {
      const std::string site = (*members.front())["raise_site"].get<std::string>();
      std::int64_t records = 0, open = 0;
      std::string fingerprints;
      for (const json* g : members) {
        records += g->value("records", std::int64_t{0});
        open += g->value("open", std::int64_t{0});
        fingerprints += (fingerprints.empty() ? "" : " ") + fingerprint_link((*g)["fingerprint"]);
      }
      body += "<tr><td><a href=\"/?raise_site=" + url_encode(id) + "\">" + html_escape(id) +
              "</a></td><td class=\"state\">" + html_escape(site) + "</td><td class=\"num\">" + std::to_string(members.size()) + "</td><td class=\"num\">" +
              std::to_string(records) + "</td><td class=\"num\">" + std::to_string(open) + "</td><td>" + fingerprints +
              "</td></tr>\n";
    }
    body += "</tbody></table>\n";
  }
  return {200, page_layout("fingerprints", "/groups", body, source.location())};
}

Page record_page(ConsoleSource& source, const std::string& id_text) {
  const ApiReply reply = source.show_record(id_text);
  if (reply.status != 200) return error_reply_page(reply);
  const json& r = reply.body;
  const std::string id = value_text(r["id"]);
  std::string body = "<h1>Record " + html_escape(id) + " <span class=\"status " + field_html(r, "status") + "\">" +
                     field_html(r, "status") + "</span></h1>\n<dl class=\"record\">\n";
  auto row = [&](const std::string& name, const std::string& html) {
    body += "<dt>" + name + "</dt><dd>" + html + "</dd>\n";
  };
  row("key", "<span class=\"key\">" + field_html(r, "key") + "</span>");
  std::string kind = field_html(r, "kind");
  if (r.contains("signal") && !r["signal"].is_null()) kind += " (" + value_html(r["signal"]) + ")";
  if (r.contains("syscall") && !r["syscall"].is_null()) kind += ", syscall " + value_html(r["syscall"]);
  if (r.contains("exit_code") && !r["exit_code"].is_null()) kind += ", exit code " + value_html(r["exit_code"]);
  row("kind", kind);
  row("fingerprint", fingerprint_link(r["fingerprint"]));
  row("message", "<span class=\"message\">" + field_html(r, "message") + "</span>");
  if (r.contains("state_error")) row("state", state_error_note(r, false));
  if (r.contains("signature")) {
    row("signature", r["signature"] == "valid" ? "valid (signed with the fleet key)" : signature_note(r, false));
  }
  row("handler", field_html(r, "handler") + " " + field_html(r, "handler_args"));
  if (r.contains("exec_argv") && r["exec_argv"].is_array() && !r["exec_argv"].empty()) {
    row("command", "<code>" + value_html(r["exec_argv"]) + "</code>");
  }
  row("policy", field_html(r, "policy_identity"));
  row("resources", "cpu " + field_html(r, "cpu_ms") + " ms, wall " + field_html(r, "wall_ms") + " ms, max rss " +
                       field_html(r, "max_rss_kb") + " KiB");
  row("payload", field_html(r, "payload_size") + " bytes, sha256 <code>" + field_html(r, "payload_sha256") + "</code>, from " +
                     field_html(r, "source"));
  row("created", field_html(r, "created_at") + ", updated " + field_html(r, "updated_at") + ", " + field_html(r, "repeats") +
                     " repeats folded in");
  if (r.contains("stream") && r["stream"].is_object()) {  // a dead letter of the fleet (fleet_quarantine_source.cpp)
    const json& st = r["stream"];
    row("dead letter", "entry " + field_html(st, "entry") + " of " + field_html(st, "name") + " (group " + field_html(st, "group") +
                           "), " + field_html(st, "deliveries") + " deliveries: " + field_html(r, "reason"));
  }
  if (r.contains("amqp") && r["amqp"].is_object()) row("dead letter", rabbitmq_html(r["amqp"]));  // amqp_quarantine.cpp
  if (r.contains("reproduce")) {
    const auto& rep = r["reproduce"];
    row("reproduces", field_html(rep, "verdict") + ": " + field_html(rep, "matches") + " of " + field_html(rep, "runs") +
                          " runs ended with this fingerprint");
  } else {
    std::string command = "pillbox reproduce " + id;
    for (const auto& arg : source.cli_source_args()) command += " " + arg;
    // What the command needs beside, never shown: named only (a password).
    std::string beside;
    for (const auto& [name, value] : source.cli_source_env()) beside += (beside.empty() ? ", with " : " and ") + name;
    row("reproduces", "not checked yet (<code>" + html_escape(command) + "</code>" +
                          (beside.empty() ? "" : html_escape(beside + " set")) + ")");
  }
  body += "</dl>\n";

  body += "<h2>Crash state</h2>\n";
  if (r.contains("crash_state") && r["crash_state"].is_array() && !r["crash_state"].empty()) {
    body += "<ol class=\"frames\">\n";
    for (const auto& frame : r["crash_state"]) body += "<li><code>" + value_html(frame) + "</code></li>\n";
    body += "</ol>\n";
  } else {
    body += "<p class=\"note\">no frames recorded</p>\n";
  }

  body += "<h2>Attempts</h2>\n<table class=\"attempts\"><thead><tr><th>#</th><th>run</th><th>started</th>"
          "<th>ended</th><th>kind</th><th>fingerprint</th><th>charged</th><th>message</th></tr></thead><tbody>\n";
  for (const auto& a : r["attempt_history"]) {
    body += "<tr><td>" + field_html(a, "n") + "</td><td>" + field_html(a, "run") + "</td><td>" + field_html(a, "started_at") +
            "</td><td>" + field_html(a, "ended_at") + "</td><td>" + field_html(a, "kind") + "</td><td>" + field_html(a, "fingerprint") +
            "</td><td>" + field_html(a, "charged") + "</td><td class=\"message\">" + field_html(a, "message") + "</td></tr>\n";
  }
  body += "</tbody></table>\n";

  body += "<h2>Audit trail</h2>\n<table class=\"audit\"><thead><tr><th>at</th><th>action</th><th>actor</th>"
          "<th>detail</th></tr></thead><tbody>\n";
  for (const auto& e : r["audit"]) {
    body += "<tr><td>" + field_html(e, "at") + "</td><td>" + field_html(e, "action") + "</td><td class=\"actor\">" +
            field_html(e, "actor") + "</td><td>" + field_html(e, "detail") + "</td></tr>\n";
  }
  body += "</tbody></table>\n";

  // The operators' patches (quarantine patch, or the form below), oldest first.
  body += "<h2>Revisions</h2>\n";
  if (r.contains("revisions") && r["revisions"].is_array() && !r["revisions"].empty()) {
    body += "<table class=\"revisions\"><thead><tr><th>#</th><th>at</th><th>actor</th><th>note</th><th>change</th>"
            "<th>payload</th></tr></thead><tbody>\n";
    for (const auto& v : r["revisions"]) {
      body += "<tr><td>" + field_html(v, "n") + "</td><td>" + field_html(v, "at") + "</td><td class=\"actor\">" +
              field_html(v, "actor") + "</td><td class=\"note-text\">" + field_html(v, "note") + "</td><td>" + field_html(v, "summary") +
              "</td><td class=\"num\">" + field_html(v, "payload_size") + " bytes</td></tr>\n";
    }
    body += "</tbody></table>\n<p class=\"note\">A replay runs the newest revision; the original is unchanged.</p>\n";
  } else {
    body += "<p class=\"note\">none: the record is as it was quarantined</p>\n";
  }

  const std::string stderr_tail = r.contains("stderr_tail") && r["stderr_tail"].is_string() ? r["stderr_tail"].get<std::string>() : "";
  if (!stderr_tail.empty()) {
    body += "<h2>stderr (last " + std::to_string(stderr_tail.size()) + " bytes of the final attempt)</h2>\n";
    body += "<pre class=\"stderr\">" + html_escape(stderr_tail) + "</pre>\n";
  }

  body += "<h2>Payload</h2>\n";
  // Its first bytes only (and three more, for a UTF-8 sequence cut at the
  // end): a payload may be up to 1 GiB, and a page may be asked for often.
  const PayloadReply payload = source.preview(id_text, kPreviewBytes + 3);
  if (payload.error.status == 200) {
    const auto size = r.contains("payload_size") && r["payload_size"].is_number_unsigned()
                          ? r["payload_size"].get<std::size_t>()
                          : payload.bytes.size();
    body += payload_preview_html(payload.bytes, kPreviewBytes, size);
    body += "<p><a class=\"download\" href=\"/api/records/" + url_encode(id) + "/payload\" download>download the "
            "payload</a> (exact bytes) · <a class=\"download\" href=\"/api/records/" + url_encode(id) +
            "/bundle\" download>download the bundle</a> (record-" + html_escape(id) +
            ".tar.gz: payload, policy, record.json, reproduce.sh, as <code>quarantine export --bundle</code>)</p>\n";
  } else {
    body += "<p class=\"error\">unreadable: " + value_html(payload.error.body["error"]) + "</p>\n";
  }

  const std::string status = value_text(r["status"]);
  if (source.can().patches && (status == "quarantined" || status == "failed-again" || status == "allowed")) {
    // Read by /static/console.js: the file as base64, or the K=V lines.
    // Arguments where records have their own (a fleet's task carries none: its workers' --arg decides).
    const bool args = source.can().patches_args && value_text(r["handler"]) != "exec";
    std::string options;  // the fleet's, in the commands shown
    for (const auto& arg : source.cli_source_args()) options += " " + arg;
    body += "<h2>Patch</h2>\n<form id=\"patch-form\" class=\"action\" method=\"post\" data-action=\"/api/records/" +
            html_escape(url_encode(id)) + "/patch\">\n"
            "<label>note <input name=\"note\" required maxlength=\"4096\" size=\"40\"></label>\n"
            "<label>new payload <input name=\"payload\" type=\"file\"></label>\n";
    if (args) {
      body += "<label>or arguments (K=V, one a line) <textarea name=\"set_args\" rows=\"3\" cols=\"30\">"
              "</textarea></label>\n";
    }
    body += "<label>access token <input id=\"patch-token\" type=\"password\" autocomplete=\"off\" "
            "size=\"20\" placeholder=\"serve.token\"></label>\n"
            "<button type=\"submit\">Patch</button>\n<output id=\"patch-result\"></output>\n</form>\n"
            "<p class=\"note\">Stored as the next revision beside the original (payloads up to 8 MiB here; larger "
            "ones: <code>pillbox quarantine patch " + html_escape(id) + " --payload-file FILE --note TEXT" +
            html_escape(options) + "</code>). Run it: <code>pillbox quarantine replay " + html_escape(id) +
            html_escape(options) + "</code>.</p>\n";
  }

  body += record_actions_html(id, status);

  // The review: allowed to replay (replay --allowed takes it), or that taken back.
  const bool awaits_review = status == "quarantined" || status == "failed-again";
  if (awaits_review || status == "allowed") {
    body += std::string("<h2>") + (awaits_review ? "Allow to replay" : "Revoke the allowance") +
            "</h2>\n<form id=\"allow-form\" class=\"action\" method=\"post\" data-action=\"/api/records/" +
            html_escape(url_encode(id)) + "/allow\" data-revoke=\"" + (awaits_review ? "false" : "true") + "\">\n"
            "<label>note <input name=\"note\" maxlength=\"4096\" size=\"40\"></label>\n"
            "<label>access token <input id=\"allow-token\" type=\"password\" autocomplete=\"off\" size=\"20\" "
            "placeholder=\"serve.token\"></label>\n"
            "<button type=\"submit\">" + (awaits_review ? "Allow" : "Revoke") +
            "</button>\n<output id=\"allow-result\"></output>\n</form>\n"
            "<p class=\"note\">" +
            (awaits_review ? "Reviewed: <code>pillbox quarantine replay --allowed</code> replays it (as <code>pillbox "
                             "quarantine allow " + html_escape(id) + "</code>)."
                           : "Back to quarantined, awaiting review (as <code>pillbox quarantine allow --revoke " +
                                 html_escape(id) + "</code>).") +
            "</p>\n";
  }

  if (status != "discarded") {
    body += "<h2>Discard</h2>\n<form id=\"discard-form\" class=\"action\" method=\"post\" data-action=\"/api/records/" +
            html_escape(url_encode(id)) + "/discard\">\n"
            "<label>reason <input name=\"reason\" required maxlength=\"4096\" size=\"40\"></label>\n"
            "<label>access token <input id=\"token\" type=\"password\" autocomplete=\"off\" size=\"20\" "
            "placeholder=\"serve.token\"></label>\n"
            "<button type=\"submit\">Discard</button>\n<output id=\"discard-result\"></output>\n</form>\n"
            "<p class=\"note\">The token is in the file <code>pillbox serve</code> named when it started "
            "(its line on stderr says which: <code>serve.token</code> in a store, <code>serve-redis-HASH.token</code> "
            "or <code>serve-amqp-HASH.token</code> for a fleet's, or <code>--token-file</code>); this tab keeps it "
            "(sessionStorage) until it closes.</p>\n";
  }
  return {200, page_layout("record " + id, "", body, source.location())};
}

Page tasks_page(ConsoleSource& source, const Query& query) {
  const ApiReply reply = source.list_tasks(query);
  if (reply.status == 404) return none_here(source, "Tasks", "/tasks", reply);
  if (reply.status != 200) return error_reply_page(reply);
  std::vector<std::string> states;
  for (store::TaskView v : store::kAllTaskViews) states.emplace_back(to_string(v));
  std::string body = "<h1>Tasks</h1>\n<form class=\"filters\" method=\"get\" action=\"/tasks\">\n";
  body += select("state", states, query_value(query, "state"));
  body += input("handler", query_value(query, "handler"));
  body += input("key", query_value(query, "key"));
  body += "<button type=\"submit\">Filter</button> <a href=\"/tasks\">clear</a>\n</form>\n";
  body += "<table class=\"tasks\"><thead><tr><th>key</th><th>state</th><th>attempts</th><th>last kind</th>"
          "<th>fingerprint</th><th>next retry</th><th>record</th><th>handler</th></tr></thead><tbody>\n";
  for (const auto& t : reply.body["tasks"]) {
    const std::string record = t["quarantine_id"].is_null() ? "-" : record_link(t["quarantine_id"]);
    body += "<tr><td class=\"key\">" + field_html(t, "key") + "</td><td class=\"state " + field_html(t, "state") + "\">" +
            field_html(t, "state") + "</td><td class=\"num\">" + field_html(t, "attempts") + "</td><td>" + field_html(t, "last_kind") +
            "</td><td>" + field_html(t, "last_fingerprint") + "</td><td>" + field_html(t, "next_retry_at") + "</td><td>" + record +
            "</td><td>" + field_html(t, "handler") + "</td></tr>\n";
  }
  body += "</tbody></table>\n<p class=\"paging\">" + std::to_string(reply.body["tasks"].size()) + " tasks shown (at most " +
          std::to_string(kMaxPage) + ")</p>\n";
  return {200, page_layout("tasks", "/tasks", body, source.location())};
}

// The rows are what console.js rebuilds from /api/runs every 2 s (keep the
// two in step): the page is whole without script, and live with it.
Page runs_page(ConsoleSource& source) {
  const ApiReply reply = source.live_runs();
  if (reply.status == 404) return none_here(source, "Runs", "/runs", reply);
  if (reply.status != 200) return error_reply_page(reply);
  std::string body = "<h1>Runs</h1>\n<p class=\"note\">Each <code>pillbox run</code> with this store, while it runs. "
                     "A <code>pillbox worker</code> has no store: its live numbers are at its <code>--metrics</code> "
                     "address.</p>\n";
  body += "<table class=\"runs\" id=\"live-runs\" data-source=\"/api/runs\"><thead><tr><th>run</th><th>pid</th>"
          "<th>started</th><th>updated</th><th>tasks</th><th>by kind and verdict</th><th>attempts</th>"
          "<th>slots busy</th><th>breaker</th><th>tasks/s</th></tr></thead><tbody>\n";
  for (const auto& r : reply.body["runs"]) {
    std::string kinds;
    if (r.contains("tasks") && r["tasks"].is_array()) {
      for (const auto& t : r["tasks"]) {
        if (!kinds.empty()) kinds += ", ";
        kinds += field_html(t, "kind") + " " + field_html(t, "verdict") + ": " + field_html(t, "count");
      }
    }
    std::string attempts;
    if (r.contains("attempts") && r["attempts"].is_object()) {
      for (const auto& [kind, n] : r["attempts"].items()) {
        if (!attempts.empty()) attempts += ", ";
        attempts += html_escape(kind) + ": " + value_html(n);
      }
    }
    const json slots = r.contains("slots") ? r["slots"] : json();
    char rate[32] = "-";
    if (r.contains("tasks_per_second") && r["tasks_per_second"].is_number()) {
      std::snprintf(rate, sizeof rate, "%.1f", r["tasks_per_second"].get<double>());
    }
    body += "<tr><td class=\"num\">" + field_html(r, "run_id") + "</td><td class=\"num\">" + field_html(r, "pid") + "</td><td>" +
            field_html(r, "started_at") + "</td><td>" + field_html(r, "updated_at") + "</td><td class=\"num\">" +
            field_html(r, "tasks_total") + "</td><td>" + kinds + "</td><td>" + attempts + "</td><td class=\"num\">" +
            field_html(slots, "busy") + " / " + field_html(slots, "total") + "</td><td>" + field_html(r, "breaker") +
            "</td><td class=\"num\">" + rate + "</td></tr>\n";
  }
  body += "</tbody></table>\n<p class=\"paging\" id=\"live-runs-empty\"" +
          std::string(reply.body["runs"].empty() ? "" : " hidden") + ">no run is attached to this store</p>\n";
  return {200, page_layout("runs", "/runs", body, source.location())};
}

}  // namespace pillbox::serve
