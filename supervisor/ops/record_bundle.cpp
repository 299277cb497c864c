#include "supervisor/ops/record_bundle.h"

#include "shared/policy_parser.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/io/shell_quote.h"

namespace pillbox {
namespace {

// Text for one line of a shell comment: a record read from a fleet's Redis
// may hold a newline, which would end the comment and start a command.
std::string comment_text(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) out += (ch < 0x20 || ch == 0x7f) ? '?' : static_cast<char>(ch);
  return out;
}

// The lines of reproduce.sh that choose the policy, as `set --` arguments for
// `pillbox run`: $PILLBOX_POLICY when the operator gives one (a name, or a
// file, made absolute before the script changes directory), else the
// shipped policy this machine runs the record under (record_policy.h) with
// the record's limits and paths as flags. Never policy.policy unless the
// operator names it: that file is what the record claims, kept to be read.
// A record whose policy this machine would not run says so and stops.
std::string policy_lines(const store::QuarantineEntry& e) {
  std::string lines =
      "if [ -n \"${PILLBOX_POLICY:-}\" ]; then\n"
      "  case $PILLBOX_POLICY in\n"
      "    /*) ;;\n"
      "    */*|*.policy) PILLBOX_POLICY=$(pwd)/$PILLBOX_POLICY ;;\n"
      "  esac\n"
      "  set -- --policy \"$PILLBOX_POLICY\"\n";
  auto policy = policy_for_record(e.policy, e.policy_identity);
  if (!policy) {
    return lines +
           "else\n"
           "  echo \"reproduce.sh: \"" + shell_quote(comment_text(policy.error())) + " >&2\n"
           "  echo \"  policy.policy beside this script is the policy the record names: read it; to run under it,\" >&2\n"
           "  echo \"  PILLBOX_POLICY=$(dirname \"$0\")/policy.policy $0 (or PILLBOX_POLICY=exec, a shipped one)\" >&2\n"
           "  exit 2\n"
           "fi\n";
  }
  const std::string shipped_name = policy->origin.substr(policy->origin.find(':') + 1);
  auto shipped = resolve_policy(shipped_name);
  lines += "else\n  set -- --policy " + shell_quote(shipped_name);
  if (shipped) {
    for (const auto& flag : run_flags_for(*shipped, *policy)) lines += " " + shell_quote(flag);
  }
  return lines + "\nfi\n";
}

}  // namespace

// Which pillbox: $PILLBOX, else the one on PATH; resolved before the script
// changes directory, so a relative $PILLBOX works, and a missing one gets
// advice instead of a shell's "pillbox: not found".
std::string reproduce_script(const std::string& id, const store::QuarantineRecord& r) {
  const store::QuarantineEntry& e = r.entry;
  std::string cmd = "\"$pillbox\" run --no-store --max-attempts 1 --no-breaker --json --jobs 1 \"$@\"";
  std::string tail;
  std::string feed;  // what stdin gets
  if (e.handler == "exec") {
    auto argv = nlohmann::json::parse(e.exec_argv, nullptr, false);
    // The payload as a JSON line with the record's key: an exec command is
    // given its file under the key's name, and {key} and $PILLBOX_KEY
    // (shared/task_input.h), which a script may act on and its messages
    // name; a file named ./payload would fail another way, or not at all.
    const std::string key_json =
        nlohmann::json(e.key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    feed = "{ printf '%s' " + shell_quote("{\"key\":" + key_json + ",\"payload_b64\":\"") +
           "; base64 -w0 payload; printf '\"}\\n'; } | ";
    tail = " - --";
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
         "# Runs quarantine record " + comment_text(id) + " again, in the sandbox, the way it was quarantined:\n"
         "#   kind " + comment_text(e.kind) + ", fingerprint " + comment_text(e.fingerprint) + "\n"
         "# Expect the same kind and fingerprint in the JSON line it prints.\n"
         "# Runs $PILLBOX when it is set (PILLBOX=/path/to/build/pillbox ./reproduce.sh), else pillbox from PATH.\n"
         "# Runs under $PILLBOX_POLICY when it is set (a shipped name, or a policy file: policy.policy here is\n"
         "# the one the record names), else under the shipped policy below.\n"
         "set -e\n"
         "pillbox=${PILLBOX:-pillbox}\n"
         "case $pillbox in\n"
         "  /*) ;;\n"
         "  */*) pillbox=$(pwd)/$pillbox ;;\n"
         "  *) pillbox=$(command -v \"$pillbox\") || pillbox= ;;\n"
         "esac\n"
         "if [ -z \"$pillbox\" ] || [ ! -f \"$pillbox\" ] || [ ! -x \"$pillbox\" ]; then\n"
         "  if [ -n \"${PILLBOX:-}\" ]; then\n"
         "    echo \"reproduce.sh: PILLBOX=$PILLBOX is not an executable pillbox\" >&2\n"
         "  else\n"
         "    echo \"reproduce.sh: pillbox is not on PATH\" >&2\n"
         "  fi\n"
         "  echo \"  install it (cmake --install BUILD_DIR --prefix PREFIX, then put PREFIX/bin on PATH),\" >&2\n"
         "  echo \"  or name one: PILLBOX=/path/to/pillbox $0\" >&2\n"
         "  exit 127\n"
         "fi\n" +
         policy_lines(e) +
         "cd \"$(dirname \"$0\")\"\n" +
         (feed.empty() ? "exec " + cmd + tail + "\n" : feed + cmd + tail + "\n");
}

std::vector<BundleFile> record_bundle_files(const std::string& id, const store::QuarantineRecord& r,
                                            const nlohmann::json& full, std::string payload) {
  std::vector<BundleFile> files;
  files.push_back({"payload", std::move(payload), 0600});
  files.push_back({"policy.policy", r.entry.policy, 0600});
  files.push_back({"record.json", full.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", 0600});
  files.push_back({"reproduce.sh", reproduce_script(id, r), 0700});
  return files;
}

}  // namespace pillbox
