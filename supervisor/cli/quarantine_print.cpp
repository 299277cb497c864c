#include "supervisor/cli/quarantine_print.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/cli/run_output.h"
#include "supervisor/io/shell_quote.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/ops/raise_site_rollup.h"
#include "supervisor/ops/record_bundle.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox::cli {
namespace {

constexpr std::size_t kPreviewBytes = 512;

std::string human_bytes(std::int64_t n) {
  char buf[64];
  if (n < 10 * 1024) std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(n));
  else if (n < 10 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB (%lld bytes)", n / 1024.0, static_cast<long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f MiB (%lld bytes)", n / 1048576.0, static_cast<long long>(n));
  return buf;
}

nlohmann::json parsed(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(text) : j;
}

std::string dump(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status write_file(const std::string& path, const std::string& bytes, bool force, mode_t mode) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (force ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST) return Status::error(path + " exists; give --force to overwrite it");
    return Status::error("cannot write " + path + ": " + std::strerror(errno));
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return Status::error("cannot write " + path + ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return Status::error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace

std::string id_text(const nlohmann::json& id) { return id.is_string() ? id.get<std::string>() : id.dump(); }

// ---- list ---------------------------------------------------------------------

int list_records(const Args& args, store::ListFilter filter, QuarantineSource& source) {
  for (const auto& [name, field] : {std::pair{"limit", &filter.limit}, {"offset", &filter.offset}}) {
    if (auto v = args.value(name)) {
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || n < 0 || errno != 0) {
        return quarantine_error(std::string("--") + name + " expects a whole number, got '" + *v + "'", kExitUsage);
      }
      *field = n;
    }
  }
  const bool json = args.flag("json");
  const bool signatures = source.can().signatures;
  const std::string where = source.where();
  std::string out;
  if (!json) {
    char line[512];
    std::snprintf(line, sizeof line, "%-*s %-24s %-12s %-17s %-21s %s%s\n", source.id_width(), "ID", "CREATED",
                  "STATUS", "KIND", "FINGERPRINT", signatures ? "SIGNATURE " : "", "KEY");
    out += line;
  }
  std::size_t shown = 0;
  // Streamed: a listing of 100 000 records is never in memory at once.
  const Status s = source.each(filter, [&](const SourcedRecord& sourced) {
    const store::QuarantineRecord& r = sourced.record;
    const std::string& signature = sourced.signature;
    ++shown;
    if (json) {
      // The store's own id needs no rewrite of the object.
      // (A state that cannot be read is the console's and show's note.)
      if (sourced.id.is_number() && sourced.id.get<std::int64_t>() == r.id && signature.empty()) {
        out += quarantine_record_json(r, 0, false, where);
      } else {
        nlohmann::json j = record_list_json(sourced.id, r, where);
        if (!signature.empty()) j["signature"] = signature;
        out += dump(j);
      }
      out += '\n';
    } else {
      char line[1024];
      const std::string signature_cell = signatures ? signature + std::string(
          signature.size() < 9 ? 10 - signature.size() : 1, ' ') : "";
      std::snprintf(line, sizeof line, "%-*s %-24s %-12s %-17s %-21s %s%s\n", source.id_width(), id_text(sourced.id).c_str(),
                    iso_time(r.created_at).c_str(), std::string(to_string(r.status)).c_str(), table_cell(r.entry.kind, 17).c_str(),
                    table_cell(r.entry.fingerprint, 21).c_str(), signature_cell.c_str(),
                    table_cell(r.entry.key, 120).c_str());
      out += line;
    }
    if (out.size() > (1 << 16)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
    return true;
  });
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  if (!s) return quarantine_error(s.message(), exit_code_for(s.code()));
  if (!json) {
    // Paging: say where this page sits in the whole (counted only then: on
    // Redis a count reads the whole dead-letter stream again).
    if (filter.limit >= 0 || filter.offset > 0) {
      auto total = source.count(filter);
      const long long all = total ? static_cast<long long>(*total) : -1;
      std::fprintf(stderr, "%zu record%s shown (from %lld) of %lld\n", shown, shown == 1 ? "" : "s",
                   static_cast<long long>(filter.offset) + (shown > 0 ? 1 : 0), all);
    } else {
      std::fprintf(stderr, "%zu record%s\n", shown, shown == 1 ? "" : "s");
    }
  }
  if (const std::string left_out = source.left_out(); !left_out.empty()) {
    std::fprintf(stderr, "%s\n", left_out.c_str());
  }
  return kExitOk;
}

// ---- stats --------------------------------------------------------------------

// A group's crash state for its line: the innermost frames, "f < g < h",
// cut after a whole frame or word.
std::string state_cell(const std::string& crash_state) {
  const auto state = parsed(crash_state);
  std::string text;
  if (state.is_array()) {
    for (const auto& frame : state) {
      if (!frame.is_string()) continue;
      text += (text.empty() ? "" : " < ") + frame.get<std::string>();
      if (text.size() > 80) break;
    }
  }
  return text.empty() ? "-" : table_cell(cut_at_word(text, 44), 0);
}

int print_stats(const std::vector<store::FingerprintStats>& groups, const std::vector<nlohmann::json>& example_ids,
                bool json) {
  std::string out;
  std::int64_t records = 0;
  if (json) {
    for (const nlohmann::json& group : fingerprint_stats_json(groups, example_ids)) out += dump(group) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  }
  int width = 8;  // the store's numbers; the fleet's entry ids are longer
  for (const auto& id : example_ids) width = std::max(width, static_cast<int>(id_text(id).size()));
  char line[1024];
  std::snprintf(line, sizeof line, "%-21s %-17s %7s %6s %7s %-24s %-24s %-*s %-44s %s\n", "FINGERPRINT", "KIND",
                "RECORDS", "OPEN", "REPEATS", "FIRST SEEN", "LAST SEEN", width, "EXAMPLE", "CRASH STATE", "MESSAGE");
  out += line;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    records += g.records;
    std::snprintf(line, sizeof line, "%-21s %-17s %7lld %6lld %7lld %-24s %-24s %-*s %-44s %s\n",
                  table_cell(g.fingerprint, 21).c_str(), table_cell(g.kind, 17).c_str(), static_cast<long long>(g.records),
                  static_cast<long long>(g.open), static_cast<long long>(g.repeats), iso_time(g.first_ms).c_str(),
                  iso_time(g.last_ms).c_str(), width, id_text(example_ids.at(i)).c_str(), state_cell(g.crash_state).c_str(),
                  table_cell(cut_at_word(g.message, 60), 0).c_str());
    out += line;
  }
  // One bug met through several callers: its groups together, with what
  // selects them as one.
  const std::vector<RaiseSiteRollup> sites = raise_site_rollup(groups);
  if (!sites.empty()) out += "\nsame raise site (groups that differ only by their callers):\n";
  for (const RaiseSiteRollup& site : sites) {
    out += "  " + site.site.id + "  " + table_cell(cut_at_word(site.site.text, 100), 0) + "  " +
           std::to_string(site.groups.size()) + " groups, " + std::to_string(site.records) + " records (" +
           std::to_string(site.open) + " open): ";
    for (std::size_t i = 0; i < site.groups.size(); ++i) {
      out += (i == 0 ? "" : ", ") + table_cell(groups[site.groups[i]].fingerprint, 21);
    }
    out += "\n";
  }
  if (!sites.empty()) out += "  (select one's records with --raise-site ID: list, stats, replay, discard)\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  // How many records are in each status, over every group.
  std::string statuses;
  for (store::RecordStatus s : store::kAllRecordStatuses) {
    std::int64_t n = 0;
    for (const auto& g : groups) {
      if (const auto found = g.by_status.find(s); found != g.by_status.end()) n += found->second;
    }
    statuses += (statuses.empty() ? ": " : ", ") + std::to_string(n) + " " + std::string(to_string(s));
  }
  std::fprintf(stderr, "%lld record%s in %zu group%s%s\n", static_cast<long long>(records), records == 1 ? "" : "s",
               groups.size(), groups.size() == 1 ? "" : "s", statuses.c_str());
  return kExitOk;
}

// ---- show and export -----------------------------------------------------------

// show's lines for what only RabbitMQ says of a dead letter (show --json's
// "amqp"): where it came from, the broker's own dead-lettering, x-death.
// Every value is the dead letter's claim, read as such.
namespace {
// A field of a broker's JSON as one cell of text ("-" when absent).
std::string json_cell(const nlohmann::json& j, const char* name, std::size_t width) {
  const auto v = j.find(name);
  if (v == j.end()) return std::string("-");
  return table_cell(
      v->is_string() ? v->get<std::string>() : v->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      width);
}

std::string rabbitmq_lines(const nlohmann::json& amqp) {
  std::string out = "rabbitmq: queue " + json_cell(amqp, "queue", 120) + ", message id " + json_cell(amqp, "message_id", 120) +
                    ", offset " + json_cell(amqp, "offset", 20) + " of its .dlq\n";
  if (amqp.contains("first_death_reason")) {
    out += "  dead-lettered by RabbitMQ itself: reason " + json_cell(amqp, "first_death_reason", 40) + ", from queue " +
           json_cell(amqp, "first_death_queue", 120) + "\n";
  }
  const auto x_death = amqp.find("x_death");
  if (x_death != amqp.end() && x_death->is_object() && x_death->contains("deaths") && (*x_death)["deaths"].is_array()) {
    const auto& deaths = (*x_death)["deaths"];
    out += "  x-death (RabbitMQ's history of it before the worker's dead letter, " + std::to_string(deaths.size()) +
           "):\n";
    for (const auto& d : deaths) {
      if (!d.is_object()) continue;
      const auto time = d.find("time");
      // Seconds since the epoch, a claim: one past the year 9999 is none.
      const bool dated = time != d.end() && time->is_number_integer() && time->get<std::int64_t>() >= 0 &&
                         time->get<std::int64_t>() < 253402300800;
      const std::string at = dated ? iso_time(time->get<std::int64_t>() * 1000) : std::string("-");
      out += "    " + json_cell(d, "reason", 20) + " from " + json_cell(d, "queue", 120) + ", count " + json_cell(d, "count", 20) +
             ", at " + at + "\n";
    }
  }
  if (amqp.contains("unreadable")) out += "  unreadable: " + json_cell(amqp, "unreadable", 300) + "\n";
  return out;
}

// show's lines for what only Kafka says of a dead letter (show --json's
// "kafka"): where it is, where it came from, the original's headers.
std::string kafka_lines(const nlohmann::json& kafka) {
  std::string out = "kafka: " + json_cell(kafka, "topic", 250) + " partition " + json_cell(kafka, "partition", 12) + " offset " +
                    json_cell(kafka, "offset", 20) + ", dedupe " + json_cell(kafka, "dedupe", 300) + "\n";
  if (const auto source = kafka.find("source"); source != kafka.end() && source->is_object()) {
    out += "  from " + json_cell(*source, "topic", 250) + " partition " + json_cell(*source, "partition", 12) + " offset " +
           json_cell(*source, "offset", 20) + "\n";
  }
  if (const auto headers = kafka.find("headers"); headers != kafka.end() && headers->is_array()) {
    out += "  the original's headers (" + std::to_string(headers->size()) + ")";
    std::string names;
    for (const auto& h : *headers) {
      if (names.size() > 200) break;
      if (h.is_object()) names += (names.empty() ? "" : ", ") + json_cell(h, "name", 80);
    }
    out += (names.empty() ? std::string() : ": " + names) + "\n";
  }
  if (kafka.contains("unreadable")) out += "  unreadable: " + json_cell(kafka, "unreadable", 300) + "\n";
  return out;
}
}  // namespace

int print_record(const ShownRecord& shown, bool json) {
  const store::QuarantineRecord& r = shown.record;
  if (json) {
    std::printf("%s\n", dump(shown.payload ? shown_record_json(shown.full, *shown.payload) : shown.full).c_str());
    return kExitOk;
  }
  const store::QuarantineEntry& e = r.entry;
  std::string out;
  auto field = [&](const char* name, const std::string& value) {
    char label[32];
    std::snprintf(label, sizeof label, "  %-13s", name);
    out += std::string(label) + value + "\n";
  };
  out += "record " + id_text(shown.id) + ": " + std::string(to_string(r.status)) + "\n";
  field("key", table_cell(e.key, 0));
  std::string kind = e.kind;
  if (e.signal != 0) kind += " (" + signal_name(static_cast<int>(e.signal)) + ")";
  if (!e.syscall.empty()) kind += ", syscall " + table_cell(e.syscall, 64);
  if (e.exit_code >= 0) kind += ", exit code " + std::to_string(e.exit_code);
  field("kind", table_cell(kind, 200));
  field("fingerprint", table_cell(e.fingerprint, 80));
  // The fleet's records: whether the fleet's key vouches for what it says.
  if (shown.full.contains("signature") && shown.full["signature"].is_string()) {
    const std::string sig = shown.full["signature"].get<std::string>();
    field("signature", sig == "valid"       ? "valid (signed with the fleet key)"
                       : sig == "missing"   ? "missing: unsigned, never run without --trust-unsigned"
                       : sig == "bad"       ? "bad: changed after it was signed, or another key; never run without "
                                              "--trust-unsigned"
                                            : "unchecked (give --fleet-key FILE to check it)");
  }
  // ... and for the operator's allowance, which replay --allowed acts on.
  if (shown.full.contains("allowance") && shown.full["allowance"].is_object()) {
    const nlohmann::json& a = shown.full["allowance"];
    const std::string sig = a.value("signature", "");
    field("allowance", "by " + table_cell(a.value("actor", ""), 80) + " at " + table_cell(a.value("at", ""), 40) +
                           (sig == "valid"       ? ", signed with the fleet key"
                            : sig == "unchecked" ? ", not checked (give --fleet-key FILE)"
                                                 : ", " + table_cell(sig, 20) +
                                                       ": replay --allowed takes it only with --trust-unsigned"));
  }
  if (!e.message.empty()) field("message", table_cell(e.message, 400));
  if (!e.crash_state.empty()) {
    out += "  crash state (innermost first):\n";
    for (const auto& frame : e.crash_state) out += "    " + table_cell(frame, 200) + "\n";
  }
  field("resources", "cpu " + std::to_string(e.cpu_ms) + " ms, wall " + std::to_string(e.wall_ms) + " ms, max rss " +
                         std::to_string(e.max_rss_kb) + " KiB");
  field("payload", human_bytes(e.payload_size) + ", sha256 " + table_cell(e.payload_sha256, 64) + ", from " +
                       table_cell(e.source, 20));
  if (!e.origin.empty()) {
    // fuzz: {"seed": ..., "mutations": ...}; import: {"file": ..., "tool": ...}
    auto origin = parsed(e.origin);
    std::string text;
    if (origin.is_object()) {
      for (const auto& [k, v] : origin.items()) {
        text += (text.empty() ? "" : ", ") + k + " " + (v.is_string() ? v.get<std::string>() : v.dump());
      }
    } else {
      text = e.origin;
    }
    field("origin", table_cell(text, 400));
  }
  if (!r.minimized_sha256.empty()) {
    field("minimized", (shown.minimized_size ? human_bytes(static_cast<std::int64_t>(*shown.minimized_size)) + ", "
                                             : std::string()) +
                           "sha256 " + table_cell(r.minimized_sha256, 64) + " (export --minimized)");
  }
  if (e.handler == "exec") {
    std::string argv;
    auto a = parsed(e.exec_argv);
    if (a.is_array()) {
      for (const auto& x : a) argv += (argv.empty() ? "" : " ") + shell_quote(x.is_string() ? x.get<std::string>() : x.dump());
    }
    field("command", table_cell(argv, 400));
    field("working dir", e.working_dir.empty()
                             ? std::string("not recorded (an older pillbox made the record): it runs again in the "
                                           "current directory")
                             : table_cell(e.working_dir, 400));
  } else {
    field("handler", table_cell(e.handler + " " + e.handler_args, 400));
  }
  field("policy", table_cell(e.policy_identity, 80) + " (export --bundle writes it)");
  field("created", iso_time(r.created_at) + ", updated " + iso_time(r.updated_at) +
                       (r.repeats > 0 ? ", " + std::to_string(r.repeats) + " repeats folded in" : ""));
  if (r.reproduce_verdict.empty()) {
    field("reproduces", "not checked yet" + (shown.reproduce_hint.empty() ? "" : " (" + shown.reproduce_hint + ")"));
  } else if (r.reproduce_verdict == "not-reproduced") {
    field("reproduces", "not reproduced (0 of " + std::to_string(r.reproduce_runs) + "): every run ended ok");
  } else {
    field("reproduces", table_cell(r.reproduce_verdict, 40) + ": " + std::to_string(r.reproduce_matches) + " of " +
                            std::to_string(r.reproduce_runs) + " runs ended with this fingerprint");
  }
  if (!e.stderr_tail.empty()) {
    out += "stderr (last " + std::to_string(e.stderr_tail.size()) + " bytes of the final attempt):\n";
    out += text_lines(e.stderr_tail, "  ", 200);
  }
  const auto& history = shown.full["attempt_history"];
  out += "attempts (" + std::to_string(history.size()) + "):\n";
  for (const auto& a : history) {
    char line[512];
    std::snprintf(line, sizeof line, "  #%-3lld %s  %-17s %-21s%s%s  %s\n", static_cast<long long>(a["n"].get<std::int64_t>()),
                  a["started_at"].is_string() ? a["started_at"].get<std::string>().c_str() : "-",
                  table_cell(a["kind"].get<std::string>(), 40).c_str(),
                  a["fingerprint"].is_null() ? "-" : table_cell(a["fingerprint"].get<std::string>(), 80).c_str(),
                  a["charged"].get<bool>() ? "" : " (not charged)", a["solo"].get<bool>() ? " (alone)" : "",
                  table_cell(a["message"].get<std::string>(), 100).c_str());
    out += line;
  }
  // An operator's patches (the store's records only): what replay runs is the last one.
  if (const auto revisions = shown.full.find("revisions");
      revisions != shown.full.end() && revisions->is_array() && !revisions->empty()) {
    out += "revisions (" + std::to_string(revisions->size()) + ", replay runs revision " +
           std::to_string(revisions->back()["n"].get<std::int64_t>()) + "; the original above is unchanged):\n";
    for (const auto& v : *revisions) {
      out += "  #" + std::to_string(v["n"].get<std::int64_t>()) + " " + v["at"].get<std::string>() + "  " +
             table_cell(v["actor"].get<std::string>(), 80) + "\n";
      out += "      note:    " + table_cell(v["note"].get<std::string>(), 300) + "\n";
      out += "      change:  " + table_cell(v["summary"].get<std::string>(), 300) + "\n";
      // On the fleet a claim of its state: shown as a cell, and its signature said.
      out += "      payload: " + human_bytes(v["payload_size"].get<std::int64_t>()) + ", sha256 " +
             table_cell(v["payload_sha256"].get<std::string>(), 80) +
             (v.contains("signature") ? ", signature " + v["signature"].get<std::string>() : std::string()) + "\n";
      if (shown.record.entry.handler != "exec") {
        out += "      args:    " + table_cell(v["handler_args"].dump(-1, ' ', false,
                                                                     nlohmann::json::error_handler_t::replace), 300) + "\n";
      }
    }
  }
  if (const auto amqp = shown.full.find("amqp"); amqp != shown.full.end() && amqp->is_object()) {
    out += rabbitmq_lines(*amqp);
  }
  if (const auto kafka = shown.full.find("kafka"); kafka != shown.full.end() && kafka->is_object()) {
    out += kafka_lines(*kafka);
  }
  const auto& trail = shown.full["audit"];
  out += "audit trail (" + std::to_string(trail.size()) + "):\n";
  for (const auto& a : trail) {
    out += "  " + a["at"].get<std::string>() + "  " + table_cell(a["action"].get<std::string>(), 20) + "  " +
           table_cell(a["actor"].get<std::string>(), 80) + ": " + table_cell(a["detail"].get<std::string>(), 300) + "\n";
  }
  if (shown.payload) {
    out += "payload (first " + std::to_string(std::min<std::size_t>(shown.payload->size(), kPreviewBytes)) + " of " +
           std::to_string(shown.payload->size()) + " bytes):\n";
    out += payload_preview(*shown.payload, kPreviewBytes, "  ");
  } else {
    out += "payload: unreadable: " + shown.payload.error() + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return shown.payload ? kExitOk : kExitSetup;
}

Status check_export_options(const Args& args) {
  const auto output = args.value("output");
  if (!output || output->empty()) return Status::error("export needs -o FILE (or -o - for stdout)");
  if (args.flag("bundle") && *output == "-") return Status::error("--bundle writes a directory; give -o DIR");
  if (args.flag("json") && *output == "-") return Status::error("-o - puts the payload on stdout; --json goes with -o FILE");
  return Status::ok();
}

namespace {

// export --json: what was written, as one object on stdout.
int print_exported(const Args& args, const nlohmann::json& id, std::size_t bytes, const std::string& sha) {
  const nlohmann::json j = {{"id", id},
                            {"output", *args.value("output")},
                            {"bundle", args.flag("bundle")},
                            {"minimized", args.flag("minimized")},
                            {"revision", args.value("revision") ? nlohmann::json(std::stoll(*args.value("revision")))
                                                                : nlohmann::json(nullptr)},
                            {"bytes", bytes},
                            {"sha256", sha}};
  std::printf("%s\n", dump(j).c_str());
  return kExitOk;
}

}  // namespace

int export_record(const Args& args, const nlohmann::json& id, const store::QuarantineRecord& r,
                  const nlohmann::json& full, const std::string& payload, const std::string& sha) {
  const auto output = args.value("output");
  const bool bundle = args.flag("bundle");
  const bool force = args.flag("force");
  if (!bundle) {
    if (*output == "-") {
      if (::isatty(STDOUT_FILENO)) {
        return quarantine_error("refusing to write a poison payload to a terminal; redirect stdout or give -o FILE",
                                kExitUsage);
      }
      if (std::fwrite(payload.data(), 1, payload.size(), stdout) != payload.size() || std::fflush(stdout) != 0) {
        return quarantine_error("cannot write the payload to stdout", kExitSetup);
      }
      return kExitOk;
    }
    if (auto s = write_file(*output, payload, force, 0600); !s) return quarantine_error(s.message(), kExitUsage);
    if (args.flag("json")) return print_exported(args, id, payload.size(), sha);
    std::fprintf(stderr, "wrote %s: %zu bytes, sha256 %s\n", output->c_str(), payload.size(), sha.c_str());
    return kExitOk;
  }

  // A bundle: a new directory, nothing in it overwritten unless --force.
  if (::mkdir(output->c_str(), 0700) != 0 && !(errno == EEXIST && force)) {
    if (errno == EEXIST) return quarantine_error(*output + " exists; give --force to write into it", kExitUsage);
    return quarantine_error("cannot create " + *output + ": " + std::strerror(errno), kExitUsage);
  }
  const std::string dir = *output;
  for (const BundleFile& f : record_bundle_files(id_text(id), r, full, payload)) {
    if (auto s = write_file(dir + "/" + f.name, f.bytes, force, f.mode); !s) return quarantine_error(s.message(), kExitUsage);
  }
  if (args.flag("json")) return print_exported(args, id, payload.size(), sha);
  std::fprintf(stderr, "wrote %s/: payload (%zu bytes, sha256 %s), policy.policy, record.json, reproduce.sh\n",
               dir.c_str(), payload.size(), sha.c_str());
  return kExitOk;
}

// ---- discard, allow ----------------------------------------------------------------

void StatusChangeReport::changed(const nlohmann::json& id, const std::string& was) {
  ++changed_;
  if (json_) {
    changed_ids_.push_back({{"id", id}, {"was", was}});
  } else {
    std::printf("record %s %s (was %s)\n", id_text(id).c_str(), words_.done, was.c_str());
  }
}

void StatusChangeReport::already(const nlohmann::json& id) {
  if (json_) {
    already_.push_back(id);
  } else {
    std::printf("record %s %s\n", id_text(id).c_str(), words_.already);
  }
}

void StatusChangeReport::finish() const {
  if (json_) {
    const nlohmann::json j = {{words_.key, changed_ids_}, {words_.already_key, already_}, {"changed", changed_}};
    std::printf("%s\n", dump(j).c_str());
  } else {
    std::fprintf(stderr, "%d record%s %s\n", changed_, changed_ == 1 ? "" : "s", words_.key);
  }
}

// ---- replay ---------------------------------------------------------------------

void print_replay_plan(const std::vector<std::pair<nlohmann::json, const store::QuarantineRecord*>>& plan,
                       std::size_t batch, const std::vector<std::string>& skipped, bool json,
                       const std::vector<std::int64_t>& revisions) {
  auto revision_of = [&](std::size_t i) { return i < revisions.size() ? revisions[i] : std::int64_t{0}; };
  if (json) {
    nlohmann::json records = nlohmann::json::array();
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const auto& [id, r] = plan[i];
      records.push_back({{"id", id},
                         {"status", to_string(r->status)},
                         {"kind", r->entry.kind},
                         {"fingerprint", r->entry.fingerprint},
                         {"key", r->entry.key}});
      if (revision_of(i) > 0) records.back()["revision"] = revision_of(i);
    }
    const nlohmann::json j = {{"dry_run", true}, {"batch", batch},       {"count", plan.size()},
                              {"records", records}, {"skipped", skipped}};
    std::printf("%s\n", dump(j).c_str());
    return;
  }
  std::printf("would replay %zu record%s, oldest first, in batches of %zu:\n", plan.size(), plan.size() == 1 ? "" : "s",
              batch);
  int width = 8;  // as in list
  for (const auto& row : plan) width = std::max(width, static_cast<int>(id_text(row.first).size()));
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& [id, r] = plan[i];
    const std::string patched = revision_of(i) > 0 ? "  (revision " + std::to_string(revision_of(i)) + ", a patch)" : "";
    std::printf("  %-*s %-12s %-17s %-21s %s%s\n", width, id_text(id).c_str(), std::string(to_string(r->status)).c_str(),
                table_cell(r->entry.kind, 40).c_str(), table_cell(r->entry.fingerprint, 80).c_str(),
                table_cell(r->entry.key, 100).c_str(),
                patched.c_str());
  }
  for (const auto& s : skipped) std::printf("  skipped: %s\n", table_cell(s, 0).c_str());  // it quotes claims
}

void print_replay_result(const nlohmann::json& id, const store::QuarantineRecord& r, const Outcome& o,
                         store::ReplayVerdict verdict, bool json, const std::string& file, std::int64_t revision,
                         const std::string& output_omitted) {
  Task task{r.entry.key, {}, 0};
  if (json) {
    auto j = nlohmann::json::parse(outcome_json(task, o, file.empty() ? nullptr : &file, nullptr));
    if (!output_omitted.empty()) {
      j.erase("output");
      j.erase("output_b64");
      j["output_omitted"] = output_omitted;
    }
    j["record_id"] = id;
    j["replay"] = std::string(to_string(verdict));
    j["original_fingerprint"] = r.entry.fingerprint;
    if (revision > 0) j["revision"] = revision;
    std::printf("%s\n", dump(j).c_str());
  } else {
    const std::string patched = revision > 0 ? " (revision " + std::to_string(revision) + ", a patch)" : "";
    std::printf("#%-6s %s  -> %s%s\n", id_text(id).c_str(), outcome_line(task, o).c_str(),
                std::string(to_string(verdict)).c_str(), patched.c_str());
  }
  std::fflush(stdout);
}

}  // namespace pillbox::cli
