// pillbox quarantine show / export: one record, read in full or written out.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "shared/base64.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/ops/quarantine_json.h"
#include "supervisor/io/terminal_text.h"

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

// The record with its attempts and audit trail, as one JSON object.
Expected<nlohmann::json> full_record_json(const QuarantineContext& c, const store::QuarantineRecord& r) {
  auto attempts = c.quarantine.attempts(r.entry.task_id);
  if (!attempts) return Error{attempts.error()};
  auto audit = c.quarantine.audit_trail(r.id);
  if (!audit) return Error{audit.error()};
  nlohmann::json j = nlohmann::json::parse(quarantine_record_json(r, 0, false, c.store_dir));
  j.erase("new_fingerprint");
  j["policy"] = r.entry.policy;
  nlohmann::json history = nlohmann::json::array();
  for (const auto& a : *attempts) {
    history.push_back({{"n", a.n},
                       {"run", a.run_id},
                       {"started_at", iso_time(a.started_at)},
                       {"ended_at", a.ended_at ? nlohmann::json(iso_time(a.ended_at)) : nlohmann::json(nullptr)},
                       {"kind", a.ended_at ? nlohmann::json(a.kind) : nlohmann::json("unfinished")},
                       {"fingerprint", a.fingerprint.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.fingerprint)},
                       {"message", a.message},
                       {"charged", a.charged},
                       {"solo", a.solo}});
  }
  j["attempt_history"] = history;
  nlohmann::json trail = nlohmann::json::array();
  for (const auto& e : *audit) {
    trail.push_back({{"at", iso_time(e.at)}, {"actor", e.actor}, {"action", e.action}, {"detail", e.detail}});
  }
  j["audit"] = trail;
  return j;
}

std::string dump(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Single-quoted for sh: the bytes as they are, quotes closed and reopened.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') out += "'\\''";
    else out += ch;
  }
  return out + "'";
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

// reproduce.sh: the record's handler and policy, the payload beside it, one
// attempt, no store, so that it runs the same way on any machine with pillbox.
std::string reproduce_script(const store::QuarantineRecord& r) {
  const store::QuarantineEntry& e = r.entry;
  std::string cmd = "pillbox run --no-store --max-attempts 1 --no-breaker --json --jobs 1 --policy ./policy.policy";
  std::string tail;
  if (e.handler == "exec") {
    auto argv = nlohmann::json::parse(e.exec_argv, nullptr, false);
    tail = " ./payload --";
    if (argv.is_array()) {
      for (const auto& a : argv) tail += " " + shell_quote(a.is_string() ? a.get<std::string>() : a.dump());
    }
  } else {
    cmd += " --handler " + shell_quote(e.handler);
    auto args = nlohmann::json::parse(e.handler_args, nullptr, false);
    if (args.is_object()) {
      for (const auto& [k, v] : args.items()) cmd += " --arg " + shell_quote(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
    }
    tail = " ./payload";
  }
  return "#!/bin/sh\n"
         "# Runs quarantine record " + std::to_string(r.id) + " again, in the sandbox, the way it was quarantined:\n"
         "#   kind " + e.kind + ", fingerprint " + e.fingerprint + "\n"
         "# Expect the same kind and fingerprint in the JSON line it prints.\n"
         "set -e\n"
         "cd \"$(dirname \"$0\")\"\n"
         "exec " + cmd + tail + "\n";
}

}  // namespace

int quarantine_show(const QuarantineContext& c) {
  auto id = parse_record_id(c.args.positional()[0]);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  auto r = find_record(c.quarantine, *id);
  if (!r) return quarantine_error(r.error(), kExitUsage);
  auto full = full_record_json(c, *r);
  if (!full) return quarantine_error(full.error(), kExitSetup);
  auto payload = c.quarantine.payloads().get(r->entry.payload_sha256);
  if (c.args.flag("json")) {
    // The first bytes, exact: base64, since a payload need not be UTF-8.
    if (payload) (*full)["payload_head_b64"] = base64_encode(std::string_view(*payload).substr(0, kPreviewBytes));
    std::printf("%s\n", dump(*full).c_str());
    return kExitOk;
  }
  const store::QuarantineEntry& e = r->entry;
  std::string out;
  auto field = [&](const char* name, const std::string& value) {
    char label[32];
    std::snprintf(label, sizeof label, "  %-13s", name);
    out += std::string(label) + value + "\n";
  };
  out += "record " + std::to_string(r->id) + ": " + std::string(to_string(r->status)) + "\n";
  field("key", table_cell(e.key, 0));
  std::string kind = e.kind;
  if (e.signal != 0) kind += " (" + signal_name(static_cast<int>(e.signal)) + ")";
  if (!e.syscall.empty()) kind += ", syscall " + table_cell(e.syscall, 64);
  if (e.exit_code >= 0) kind += ", exit code " + std::to_string(e.exit_code);
  field("kind", kind);
  field("fingerprint", e.fingerprint);
  if (!e.message.empty()) field("message", table_cell(e.message, 400));
  auto state = parsed(e.crash_state);
  if (state.is_array() && !state.empty()) {
    out += "  crash state (innermost first):\n";
    for (const auto& frame : state) out += "    " + table_cell(frame.is_string() ? frame.get<std::string>() : frame.dump(), 200) + "\n";
  }
  field("resources", "cpu " + std::to_string(e.cpu_ms) + " ms, wall " + std::to_string(e.wall_ms) + " ms, max rss " +
                         std::to_string(e.max_rss_kb) + " KiB");
  field("payload", human_bytes(e.payload_size) + ", sha256 " + e.payload_sha256 + ", from " + e.source);
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
  if (!r->minimized_sha256.empty()) {
    auto mini = c.quarantine.payloads().get(r->minimized_sha256);
    field("minimized", (mini ? human_bytes(static_cast<std::int64_t>(mini->size())) + ", " : std::string()) + "sha256 " +
                           r->minimized_sha256 + " (export --minimized)");
  }
  if (e.handler == "exec") {
    std::string argv;
    auto a = parsed(e.exec_argv);
    if (a.is_array()) {
      for (const auto& x : a) argv += (argv.empty() ? "" : " ") + shell_quote(x.is_string() ? x.get<std::string>() : x.dump());
    }
    field("command", table_cell(argv, 400));
  } else {
    field("handler", table_cell(e.handler + " " + e.handler_args, 400));
  }
  field("policy", e.policy_identity + " (export --bundle writes it)");
  field("created", iso_time(r->created_at) + ", updated " + iso_time(r->updated_at) +
                       (r->repeats > 0 ? ", " + std::to_string(r->repeats) + " repeats folded in" : ""));
  if (r->reproduce_verdict.empty()) {
    field("reproduces", "not checked yet (pillbox reproduce " + std::to_string(r->id) + ")");
  } else {
    field("reproduces", r->reproduce_verdict + ": " + std::to_string(r->reproduce_matches) + " of " +
                            std::to_string(r->reproduce_runs) + " runs ended with this fingerprint");
  }
  const auto& history = (*full)["attempt_history"];
  out += "attempts (" + std::to_string(history.size()) + "):\n";
  for (const auto& a : history) {
    char line[512];
    std::snprintf(line, sizeof line, "  #%-3lld %s  %-17s %-21s%s%s  %s\n", static_cast<long long>(a["n"].get<std::int64_t>()),
                  a["started_at"].get<std::string>().c_str(), a["kind"].get<std::string>().c_str(),
                  a["fingerprint"].is_null() ? "-" : a["fingerprint"].get<std::string>().c_str(),
                  a["charged"].get<bool>() ? "" : " (not charged)", a["solo"].get<bool>() ? " (alone)" : "",
                  table_cell(a["message"].get<std::string>(), 100).c_str());
    out += line;
  }
  const auto& trail = (*full)["audit"];
  out += "audit trail (" + std::to_string(trail.size()) + "):\n";
  for (const auto& a : trail) {
    out += "  " + a["at"].get<std::string>() + "  " + table_cell(a["action"].get<std::string>(), 20) + "  " +
           table_cell(a["actor"].get<std::string>(), 80) + ": " + table_cell(a["detail"].get<std::string>(), 300) + "\n";
  }
  if (payload) {
    out += "payload (first " + std::to_string(std::min<std::size_t>(payload->size(), kPreviewBytes)) + " of " +
           std::to_string(payload->size()) + " bytes):\n";
    out += payload_preview(*payload, kPreviewBytes, "  ");
  } else {
    out += "payload: unreadable: " + payload.error() + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return payload ? kExitOk : kExitSetup;
}

int quarantine_export(const QuarantineContext& c) {
  auto id = parse_record_id(c.args.positional()[0]);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  const auto output = c.args.value("output");
  if (!output || output->empty()) return quarantine_error("export needs -o FILE (or -o - for stdout)", kExitUsage);
  const bool bundle = c.args.flag("bundle");
  const bool force = c.args.flag("force");
  if (bundle && *output == "-") return quarantine_error("--bundle writes a directory; give -o DIR", kExitUsage);
  auto r = find_record(c.quarantine, *id);
  if (!r) return quarantine_error(r.error(), kExitUsage);
  std::string sha = r->entry.payload_sha256;
  if (c.args.flag("minimized")) {
    if (r->minimized_sha256.empty()) {
      return quarantine_error("record " + std::to_string(*id) + " has no minimized payload (pillbox minimize " +
                                  std::to_string(*id) + ")", kExitUsage);
    }
    sha = r->minimized_sha256;
  }
  auto payload = c.quarantine.payloads().get(sha);  // checked against its hash
  if (!payload) return quarantine_error(payload.error(), kExitSetup);

  if (!bundle) {
    if (*output == "-") {
      if (::isatty(STDOUT_FILENO)) {
        return quarantine_error("refusing to write a poison payload to a terminal; redirect stdout or give -o FILE",
                                kExitUsage);
      }
      if (std::fwrite(payload->data(), 1, payload->size(), stdout) != payload->size() || std::fflush(stdout) != 0) {
        return quarantine_error("cannot write the payload to stdout", kExitSetup);
      }
      return kExitOk;
    }
    if (auto s = write_file(*output, *payload, force, 0600); !s) return quarantine_error(s.message(), kExitUsage);
    std::fprintf(stderr, "wrote %s: %zu bytes, sha256 %s\n", output->c_str(), payload->size(), sha.c_str());
    return kExitOk;
  }

  // A bundle: a new directory, nothing in it overwritten unless --force.
  if (::mkdir(output->c_str(), 0700) != 0 && !(errno == EEXIST && force)) {
    if (errno == EEXIST) return quarantine_error(*output + " exists; give --force to write into it", kExitUsage);
    return quarantine_error("cannot create " + *output + ": " + std::strerror(errno), kExitUsage);
  }
  auto full = full_record_json(c, *r);
  if (!full) return quarantine_error(full.error(), kExitSetup);
  const std::string dir = *output;
  const struct {
    const char* name;
    std::string bytes;
    mode_t mode;
  } files[] = {
      {"payload", *payload, 0600},
      {"policy.policy", r->entry.policy, 0600},
      {"record.json", dump(*full, 2) + "\n", 0600},
      {"reproduce.sh", reproduce_script(*r), 0700},
  };
  for (const auto& f : files) {
    if (auto s = write_file(dir + "/" + f.name, f.bytes, force, f.mode); !s) return quarantine_error(s.message(), kExitUsage);
  }
  std::fprintf(stderr, "wrote %s/: payload (%zu bytes, sha256 %s), policy.policy, record.json, reproduce.sh\n",
               dir.c_str(), payload->size(), sha.c_str());
  return kExitOk;
}

}  // namespace pillbox::cli
