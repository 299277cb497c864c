// pillbox quarantine list|purge: what the store holds, and retention.
// (Issue 4 adds show, stats, export, replay and discard.)
#include <cstdio>
#include <string>
#include <vector>

#include "shared/failure_kind.h"
#include "shared/policy_parser.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/quarantine_json.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/store.h"
#include "supervisor/store/store_dir.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox quarantine list [--status S] [--kind K] [--fingerprint FP] [--limit N] [--offset N] [--json]\n"
    "       pillbox quarantine purge --older-than DURATION [--status S]...\n"
    "\n"
    "list   quarantine records, newest first: a table, or one JSON object per line with --json\n"
    "purge  delete records created more than DURATION ago (e.g. 30d, 12h), only those in the\n"
    "       given statuses when --status is given (quarantined, replaying, resolved, failed-again,\n"
    "       discarded); payloads no remaining record uses are deleted with them\n"
    "\n"
    "options:\n"
    "  --store DIR   the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                ~/.local/state/pillbox)\n"
    "\n"
    "exit codes: 0 done, 2 usage error, 3 the store cannot be opened\n";

const std::vector<std::string> kStatuses = {"quarantined", "replaying", "resolved", "failed-again", "discarded"};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "pillbox quarantine: %s\n", message.c_str());
  return kExitUsage;
}

Status check_status(const std::string& s) {
  for (const auto& known : kStatuses) {
    if (s == known) return Status::ok();
  }
  return Status::error("unknown status '" + s + "' (quarantined, replaying, resolved, failed-again, discarded)");
}

// The table column for text a payload's producer chose: no control bytes.
std::string cell(const std::string& text, std::size_t width) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // C1 controls in UTF-8 (e.g. U+009B, CSI)
      out += '?';
      ++i;
    } else {
      out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    }
  }
  if (out.size() > width) out = out.substr(0, width - 1) + "~";
  return out;
}

int list(const Args& args, store::QuarantineStore& q, const std::string& dir) {
  store::ListFilter filter;
  if (auto s = args.value("status")) {
    if (auto st = check_status(*s); !st) return usage_error(st.message());
    filter.status = *s;
  }
  if (auto k = args.value("kind")) {
    if (!kind_from_string(*k)) return usage_error("unknown kind '" + *k + "'");
    filter.kind = *k;
  }
  if (auto f = args.value("fingerprint")) filter.fingerprint = *f;
  for (const auto& [name, field] : {std::pair{"limit", &filter.limit}, {"offset", &filter.offset}}) {
    if (auto v = args.value(name)) {
      char* end = nullptr;
      const long long n = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || n < 0) return usage_error(std::string("--") + name + " expects a whole number");
      *field = n;
    }
  }
  auto records = q.list(filter);
  if (!records) {
    std::fprintf(stderr, "pillbox quarantine: %s\n", records.error().c_str());
    return kExitSetup;
  }
  const bool json = args.flag("json");
  std::string out;
  if (!json) {
    char line[512];
    std::snprintf(line, sizeof line, "%-8s %-24s %-12s %-17s %-21s %s\n", "ID", "CREATED", "STATUS", "KIND",
                  "FINGERPRINT", "KEY");
    out += line;
  }
  for (const auto& r : *records) {
    if (json) {
      out += quarantine_record_json(r, 0, false, dir);
      out += '\n';
    } else {
      char line[1024];
      std::snprintf(line, sizeof line, "%-8lld %-24s %-12s %-17s %-21s %s\n", static_cast<long long>(r.id),
                    iso_time(r.created_at).c_str(), r.status.c_str(), r.entry.kind.c_str(),
                    r.entry.fingerprint.c_str(), cell(r.entry.key, 120).c_str());
      out += line;
    }
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!json) std::fprintf(stderr, "%zu record%s\n", records->size(), records->size() == 1 ? "" : "s");
  return kExitOk;
}

int purge(const Args& args, store::QuarantineStore& q) {
  const auto older = args.value("older-than");
  if (!older) return usage_error("purge needs --older-than DURATION (e.g. 30d)");
  auto ms = parse_duration_ms(*older, "--older-than", 0, 100ull * 365 * 24 * 3600 * 1000);
  if (!ms) return usage_error(ms.error());
  std::vector<std::string> statuses = args.values("status");
  for (const auto& s : statuses) {
    if (auto st = check_status(s); !st) return usage_error(st.message());
  }
  auto result = q.purge(store::now_ms() - static_cast<std::int64_t>(*ms), statuses);
  if (!result) {
    std::fprintf(stderr, "pillbox quarantine: %s\n", result.error().c_str());
    return kExitSetup;
  }
  std::printf("purged %zu record%s and %zu payload%s\n", result->records, result->records == 1 ? "" : "s",
              result->payloads, result->payloads == 1 ? "" : "s");
  return kExitOk;
}

}  // namespace

int quarantine_command(int argc, char** argv) {
  const std::vector<OptionSpec> options = {
      {"store"}, {"status", true, true}, {"kind"}, {"fingerprint"}, {"limit"}, {"offset"},
      {"json", false}, {"older-than"}, {"help", false},
  };
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h") {
    std::fputs(kHelp, argc < 3 ? stderr : stdout);
    return argc < 3 ? kExitUsage : kExitOk;
  }
  const std::string verb = argv[2];
  if (verb != "list" && verb != "purge") return usage_error("unknown verb '" + verb + "' (list, purge)");
  auto args = Args::parse(argc, argv, 3, options, "quarantine " + verb);
  if (!args) return usage_error(args.error());
  if (args->flag("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  if (!args->positional().empty()) return usage_error("unexpected argument '" + args->positional()[0] + "'");
  if (verb == "list" && args->values("status").size() > 1) return usage_error("list takes one --status");
  auto dir = store::resolve_store_dir(args->value("store").value_or(""));
  if (!dir) return usage_error(dir.error());
  auto opened = store::Store::open(*dir);
  if (!opened) {
    std::fprintf(stderr, "pillbox quarantine: %s\n", opened.error().c_str());
    return kExitSetup;
  }
  auto q = store::QuarantineStore::open(opened->db(), opened->dir());
  if (!q) {
    std::fprintf(stderr, "pillbox quarantine: %s\n", q.error().c_str());
    return kExitSetup;
  }
  return verb == "list" ? list(*args, *q, opened->dir()) : purge(*args, *q);
}

}  // namespace pillbox::cli
