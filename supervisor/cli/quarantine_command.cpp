// pillbox quarantine: what the store holds and what operators do with it.
// Dispatch and purge here; the verbs that read and discard records on
// either quarantine in quarantine_records.cpp, the others beside it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "shared/failure_kind.h"
#include "shared/raise_site.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/quarantine_help.h"
#include "supervisor/cli/quarantine_open.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/io/nearest_word.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/io/time_args.h"
#include "supervisor/ops/filter_text.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox quarantine list [filters] [--limit N] [--offset N] [--json]\n"
    "       pillbox quarantine show ID [--json]\n"
    "       pillbox quarantine stats [filters] [--json]\n"
    "       pillbox quarantine export ID -o FILE [--bundle] [--minimized | --revision N] [--force] [--json]\n"
    "       pillbox quarantine discard (ID... | --raise-site RS) --reason TEXT [--json]\n"
    "       pillbox quarantine allow (ID... | --fingerprint FP | --kind K | --raise-site RS) [--revoke] [--note TEXT]\n"
    "       pillbox quarantine purge --older-than DURATION [--status S]... [--dry-run] [--yes] [--json]\n"
    "       pillbox quarantine replay (ID... | --fingerprint FP | --kind K | --raise-site RS | --all | --allowed)\n"
    "                                 [replay options]\n"
    "       pillbox quarantine import FILE|DIR... (--handler H [--arg K=V]... | -- CMD ARGS...)\n"
    "       pillbox quarantine patch ID (--payload-file F | --set-arg K=V...) --note TEXT [--json]\n"
    "       pillbox quarantine VERB ... --redis URL --stream NAME   (the fleet's quarantine, see options)\n"
    "       pillbox quarantine VERB ... --amqp URL --queue NAME     (the fleet's quarantine on RabbitMQ)\n"
    "       pillbox quarantine VERB ... --kafka BROKERS --topic T   (the fleet's quarantine on Kafka)\n"
    "\n"
    "list     records, newest first: a table, or one JSON object per line with --json\n"
    "show     everything in one record: crash state, resource usage, every attempt, the audit\n"
    "         trail, and a preview of the payload that is safe for a terminal\n"
    "stats    records grouped by fingerprint and kind, with counts and first and last seen, and how\n"
    "         many records are in each status (per group with --json, all of them on stderr); groups\n"
    "         raised at one place (a traceback's exception and innermost frame, a crash's innermost\n"
    "         frame) but reached through other callers are rolled up as one raise site after the table\n"
    "export   the exact payload bytes to FILE (- for stdout when it is not a terminal); with\n"
    "         --bundle, FILE is a new directory holding the payload, the policy, the record\n"
    "         and reproduce.sh, a command line that runs it again the same way\n"
    "discard  mark records as handled without a fix; the reason goes into the audit trail; with\n"
    "         --raise-site RS, the open records of that raise site (stats rolls them up)\n"
    "allow    an operator's review: records awaiting review (quarantined, failed-again) become\n"
    "         allowed, allowed to replay, and `replay --allowed` replays those only; --revoke takes\n"
    "         that back (to quarantined). Who and when go into the audit trail; on the fleet the\n"
    "         allowance is signed with --fleet-key, and replay --allowed takes only valid ones\n"
    "purge    delete records created more than DURATION ago (e.g. 30d, 12h, 1.5d), only those in\n"
    "         the given statuses when --status is given; payloads no remaining record uses go too.\n"
    "         --dry-run shows them and deletes nothing; records still open (quarantined, allowed,\n"
    "         replaying, failed-again) go only when confirmed: on a terminal, or with --yes\n"
    "\n"
    "replay   run quarantined payloads again, oldest first, in batches: under their recorded\n"
    "         handler and policy, or a new one (--handler H [--arg K=V]... | -- CMD ARGS..., --policy P).\n"
    "         Successes become resolved, failures failed-again (the attempt is appended); what is\n"
    "         not replayed keeps its status. It takes records quarantined, failed-again and allowed;\n"
    "         --allowed only those allowed (quarantine allow). Records resolved, discarded or being\n"
    "         replayed are skipped unless --force; two replays at once never run the same record.\n"
    "         Results go where `run` puts them (stdout, --json, --out DIR with the file names and\n"
    "         --out-mode of `run`).\n"
    "           --batch N               records claimed and judged together (default 10)\n"
    "           --rate R                payloads started per second at most\n"
    "           --stop-after K          stop once K replays fail again with one fingerprint\n"
    "           --max-failure-ratio F   stop when more than F of a batch fails again (e.g. 0.2)\n"
    "           --dry-run               show what would be replayed; change nothing\n"
    "           --allowed               only records allowed to replay (alone: all of them)\n"
    "           --jobs N                payloads at once (default: number of cores)\n"
    "\n"
    "patch    a fix by hand: a new payload (--payload-file F) or handler arguments changed\n"
    "         (--set-arg K=V, repeatable; not for exec records), stored as the record's next revision\n"
    "         beside the original, which never changes; --note says why (audit trail). Only an open\n"
    "         record (quarantined, failed-again) that no replay holds. replay then runs the newest\n"
    "         revision under the record's own key; show lists the revisions. On the fleet (--redis,\n"
    "         --amqp): the payload only, signed with --fleet-key; replay redrives the newest revision.\n"
    "\n"
    "import   crash artifacts of coverage-guided fuzzers: libFuzzer's crash-*, oom-*, timeout-*,\n"
    "         leak-* and slow-unit-* files, AFL++'s crashes/id:* and hangs/id:* (directories are\n"
    "         searched, without following symlinks unless --follow-symlinks; files named on the\n"
    "         command line are taken whatever their name; regular files only). Each runs\n"
    "         once in the sandbox under the handler or command given (options as for `run`:\n"
    "         --policy, --timeout, --cpu, --memory, --jobs); a failure becomes a record with source\n"
    "         import and the file as its origin, with the fingerprint `run` gives the same bytes.\n"
    "         An artifact that runs ok here is reported and not recorded (exit code 1); one that\n"
    "         the sandbox could not start, or a signal from outside ended, is not recorded (exit 3).\n"
    "\n"
    "filters (list, stats):\n"
    "  --status S        quarantined | allowed | replaying | resolved | failed-again | discarded\n"
    "  --kind K          crash, cpu-limit, oom, ... (see README: failure kinds)\n"
    "  --fingerprint FP  one fingerprint\n"
    "  --key KEY         one task key\n"
    "  --since WHEN      created since an age ago (24h, 7d) or a UTC date (2026-11-30[T12:00:00Z])\n"
    "  --source S        run | fuzz (found by pillbox fuzz) | import (pillbox quarantine import)\n"
    "  --handler H       records of handler H: echo, regex, exec, plugin:NAME, ...\n"
    "  --raise-site RS   the records of one raise site, by the id stats shows (rs-...): one program's\n"
    "                    exception and innermost frame, whatever the callers (replay takes it too)\n"
    "\n"
    "options:\n"
    "  --store DIR   the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                ~/.local/state/pillbox)\n"
    "  --redis URL --stream NAME\n"
    "                list, show, stats, export, discard, allow, replay and patch work on the fleet's\n"
    "                quarantine instead: the dead letters `pillbox worker --stream NAME` wrote to\n"
    "                NAME:dlq. IDs are their entry IDs (1712345678901-0); the output is the same as for\n"
    "                the store. There, replay puts the records back on NAME for the workers (fields\n"
    "                key, payload, redrive_of) and waits for each batch's outcome in NAME:results and\n"
    "                NAME:dlq, at most --batch-timeout D (default 5m), then stops and names the records\n"
    "                with none. A record being replayed is locked: a second replay of it is refused.\n"
    "                --handler, --arg, --policy, --jobs and --source do not apply there, nor purge and\n"
    "                import; patch takes a payload only. reproduce and minimize take --redis URL\n"
    "                --stream NAME too.\n"
    "  --amqp URL --queue NAME\n"
    "                list, show, stats, export, discard, allow, replay and patch work on the fleet's\n"
    "                quarantine on RabbitMQ: the dead letters `pillbox worker --amqp URL --queue NAME`\n"
    "                (or the broker, past x-delivery-limit) wrote to the stream queue NAME.dlq. IDs are\n"
    "                their offsets there (42); a listing reads the stream by offset, so it neither\n"
    "                consumes nor re-counts them. The canaries of `pillbox doctor` are left out, and how\n"
    "                many is said on stderr. There, replay republishes each record to NAME (its\n"
    "                message_id, correlation_id, reply_to and headers, and headers pillbox-replay and\n"
    "                pillbox-replay-of) and waits for each batch's outcome: the workers' notices in\n"
    "                NAME.dlq.state, dead letters in NAME.dlq. A record being replayed is locked (the\n"
    "                queue NAME.dlq.lock.ID, gone with the replay's connection). reproduce and minimize\n"
    "                take --amqp URL --queue NAME too.\n"
    "  --kafka HOST:PORT[,HOST:PORT...] --topic T\n"
    "                list, show, stats, export, discard and allow work on the fleet's quarantine on\n"
    "                Kafka: the dead letters `pillbox worker --kafka BROKERS --topic T` wrote to the\n"
    "                topic T.dlq. IDs are PARTITION@OFFSET there (0@42); a listing reads every\n"
    "                partition from its beginning without a consumer group, so it commits and moves\n"
    "                nothing. A letter written again for the same record (pillbox.dedupe, value and\n"
    "                signature) is a copy: left out, and how many is said on stderr. What operators\n"
    "                do with a record is kept in the topic T.dlq.state (one partition, kept for\n"
    "                ever). reproduce and replay take --kafka BROKERS --topic T too: replay republishes\n"
    "                each record's key, value and headers (not pillbox's) to T, its header\n"
    "                pillbox.replay naming the record, and waits for its settled entry in\n"
    "                T.pillbox-attempts; a lease in T.dlq.state keeps a second replay off it. patch\n"
    "                keeps its revisions in the topic T.dlq.revisions, minimize its payloads in\n"
    "                T.dlq.minimized (one partition each, made by the operator as T.dlq.state is).\n"
    "  --fleet-key FILE  with --redis, --amqp or --kafka: the key the workers sign dead letters\n"
    "                with (default $PILLBOX_FLEET_KEY); list and show say whether each signature is valid, missing\n"
    "                or bad (unchecked without a key). replay and export --bundle act only on\n"
    "                records with a valid one, unless --trust-unsigned. patch signs its revision with\n"
    "                it, and replay redrives a revision only on a valid signature.\n"
    "\n"
    "`pillbox quarantine VERB --help` (or `pillbox help quarantine VERB`) describes one verb, with\n"
    "its --json fields.\n"
    "\n"
    "exit codes: 0 done (replay: every replayed payload resolved), 1 replay: some failed again or a stop\n"
    "condition ended it, 2 usage error or no such record, 3 the store, the broker or the sandbox cannot be used\n";

const std::map<std::string, int (*)(const RecordsContext&)> kRecordVerbs = {
    {"list", quarantine_list},     {"show", quarantine_show},       {"stats", quarantine_stats},
    {"export", quarantine_export}, {"discard", quarantine_discard}, {"replay", quarantine_replay},
    {"patch", quarantine_patch},   {"allow", quarantine_allow},
};

const std::vector<OptionSpec> kFilterOptions = {{"status"}, {"kind"},   {"fingerprint"}, {"key"},
                                                {"since"},  {"source"}, {"handler"},     {"raise-site"}};

// The options each verb takes.
std::vector<OptionSpec> options_of(const std::string& verb) {
  std::vector<OptionSpec> o = {{"store"}, {"help", false}};
  auto add = [&](const std::vector<OptionSpec>& more) { o.insert(o.end(), more.begin(), more.end()); };
  // Every verb: one that works on the store only says so (on_fleet).
  add({{"redis"}, {"stream"}, {"amqp"}, {"queue"}, {"kafka"}, {"topic"}});
  add(kFleetKeyOptions);
  if (verb == "replay") add({{"batch-timeout"}});
  if (verb == "list") add(kFilterOptions), add({{"limit"}, {"offset"}, {"json", false}});
  if (verb == "stats") add(kFilterOptions), add({{"json", false}});
  if (verb == "show") add({{"json", false}});
  if (verb == "export") {
    add({{"output", true, false, 'o'}, {"bundle", false}, {"minimized", false}, {"force", false}, {"json", false},
         {"revision"}});
  }
  if (verb == "discard") add({{"reason"}, {"raise-site"}, {"json", false}});
  if (verb == "allow") {
    add({{"fingerprint"}, {"kind"}, {"raise-site"}, {"revoke", false}, {"note"}, {"json", false}});
  }
  if (verb == "patch") add({{"payload-file"}, {"set-arg", true, true}, {"note"}, {"json", false}});
  if (verb == "purge") add({{"older-than"}, {"status", true, true}, {"dry-run", false}, {"yes", false}, {"json", false}});
  if (verb == "import") add(kChildOptions), add({{"jobs"}, {"json", false}, {"follow-symlinks", false}, {"quiet", false}});
  if (verb == "replay") {
    add({{"fingerprint"}, {"kind"}, {"raise-site"}, {"all", false}, {"allowed", false}, {"batch"}, {"rate"},
         {"stop-after"}, {"max-failure-ratio"}, {"dry-run", false}, {"force", false}, {"handler"}, {"arg", true, true}, {"policy"}, {"jobs"}, {"json", false},
         {"quiet", false}});
    add(kOutOptions);
    add(kRecordAllowanceOptions);
  }
  return o;
}

}  // namespace

Status check_raise_site_id(const std::string& text) {
  if (is_raise_site_id(text)) return Status::ok();
  return Status::error("--raise-site takes a raise site's id as quarantine stats shows it (rs- and 16 hex digits; "
                       "--json: raise_site_id), not '" + table_cell(text, 60) + "'");
}

Expected<store::ListFilter> read_filter(const Args& args) {
  store::ListFilter filter;
  if (auto s = args.value("status")) {
    auto status = record_status_filter(*s);
    if (!status) return Error{status.error()};
    filter.status = *status;
  }
  if (auto k = args.value("kind")) {
    if (!kind_from_string(*k)) return Error{"unknown kind '" + *k + "' (see pillbox run --help)"};
    filter.kind = *k;
  }
  filter.fingerprint = args.value("fingerprint");
  filter.key = args.value("key");
  if (auto since = args.value("since")) {
    auto ms = parse_since(*since, "--since", store::now_ms());
    if (!ms) return Error{ms.error()};
    filter.since_ms = *ms;
  }
  if (auto text = args.value("source")) {
    auto source = record_source_filter(*text);
    if (!source) return Error{source.error()};
    filter.source = *source;
  }
  // The handler's name as records keep it (echo, regex, exec, plugin:NAME): a
  // name no record has matches none, as an unknown key does.
  filter.handler = args.value("handler");
  if (auto site = args.value("raise-site")) {
    if (auto s = check_raise_site_id(*site); !s) return Error{s.message()};
    filter.raise_site = *site;
  }
  return filter;
}

namespace {

// purge --dry-run: the records it would delete, and none deleted.
int show_purge_plan(const std::vector<store::PurgeCandidate>& plan, std::size_t open, bool json) {
  if (json) {
    nlohmann::json ids = nlohmann::json::array();
    for (const auto& r : plan) ids.push_back(r.id);
    const nlohmann::json j = {{"dry_run", true}, {"records", plan.size()}, {"open_records", open},
                              {"payloads", nullptr}, {"ids", ids}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::printf("would purge %zu record%s (%zu still open); nothing deleted\n", plan.size(), plan.size() == 1 ? "" : "s",
              open);
  for (const auto& r : plan) {
    std::printf("  %-8lld %-12s %-17s %s\n", static_cast<long long>(r.id), std::string(to_string(r.status)).c_str(),
                r.kind.c_str(), table_cell(r.key, 100).c_str());
  }
  return kExitOk;
}

// Open records go only when someone says so: on a terminal, a question;
// without one, --yes. True to go on.
bool confirm_open_purge(std::size_t open) {
  if (::isatty(STDIN_FILENO) != 1) {
    quarantine_error("purge would delete " + std::to_string(open) + " open record" + (open == 1 ? "" : "s") +
                         " (quarantined, allowed, replaying or failed-again) and there is no terminal to ask; add --yes to "
                         "delete them, or --status resolved --status discarded to keep them (see them: --dry-run)",
                     kExitUsage);
    return false;
  }
  std::fprintf(stderr, "delete %zu open record%s? [y/N] ", open, open == 1 ? "" : "s");
  std::fflush(stderr);
  char answer[16] = {};
  const bool yes = std::fgets(answer, sizeof answer, stdin) != nullptr &&
                   (std::strcmp(answer, "y\n") == 0 || std::strcmp(answer, "yes\n") == 0 ||
                    std::strcmp(answer, "Y\n") == 0);
  if (!yes) quarantine_error("nothing deleted", kExitUsage);
  return yes;
}

int purge(const QuarantineContext& c) {
  const auto older = c.args.value("older-than");
  if (!older) return quarantine_error("purge needs --older-than DURATION (e.g. 30d)", kExitUsage);
  auto ms = parse_duration_arg(*older, "--older-than", 0, 100ull * 365 * 24 * 3600 * 1000);
  if (!ms) return quarantine_error(ms.error(), kExitUsage);
  std::vector<store::RecordStatus> statuses;
  for (const auto& s : c.args.values("status")) {
    auto status = record_status_filter(s);
    if (!status) return quarantine_error(status.error(), kExitUsage);
    statuses.push_back(*status);
  }
  const std::int64_t cutoff = store::now_ms() - static_cast<std::int64_t>(*ms);
  auto plan = c.quarantine.purge_candidates(cutoff, statuses);
  if (!plan) return quarantine_error(plan.error(), kExitSetup);
  std::size_t open = 0;
  for (const auto& r : *plan) open += store::is_open(r.status) ? 1 : 0;
  const bool json = c.args.flag("json");
  if (c.args.flag("dry-run")) return show_purge_plan(*plan, open, json);
  const bool yes = c.args.flag("yes");
  if (open > 0 && !yes && !confirm_open_purge(open)) return kExitUsage;
  // No more open records than were confirmed: one that became open since
  // (a replay claimed it) stops the purge instead of going unasked.
  auto result = c.quarantine.purge(cutoff, statuses, yes ? static_cast<std::size_t>(-1) : open);
  if (!result) return quarantine_error(result.error(), exit_code_for(result.error_code()));
  if (json) {
    const nlohmann::json j = {{"dry_run", false},          {"records", result->records},
                              {"open_records", result->open_records}, {"payloads", result->payloads},
                              {"ids", result->ids}};
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("purged %zu record%s and %zu payload%s\n", result->records, result->records == 1 ? "" : "s",
              result->payloads, result->payloads == 1 ? "" : "s");
  return kExitOk;
}

// With --redis or --amqp: the options that are the store's only, said before the broker is read.
Status refuse_store_options(const Args& args) {
  const std::string broker = args.value("amqp") ? "--amqp" : args.value("kafka") ? "--kafka" : "--redis";
  if (args.value("source")) {
    return Status::error("--source does not apply with " + broker + ": every record there comes from a worker");
  }
  return Status::ok();
}

}  // namespace

int quarantine_error(const std::string& message, int exit_code) {
  return command_error("quarantine", message, exit_code);
}

int quarantine_command(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h" || std::string(argv[2]) == "help") {
    std::fputs(kHelp, argc < 3 ? stderr : stdout);
    return argc < 3 ? kExitUsage : kExitOk;
  }
  const std::string verb = argv[2];
  static const std::map<std::string, int (*)(const QuarantineContext&)> kStoreVerbs = {
      {"purge", purge}, {"import", quarantine_import},
  };
  const auto found = kStoreVerbs.find(verb);
  const auto records_verb = kRecordVerbs.find(verb);
  if (found == kStoreVerbs.end() && records_verb == kRecordVerbs.end()) {
    std::vector<std::string> verbs;
    for (const auto& [name, run] : kStoreVerbs) verbs.push_back(name);
    for (const auto& [name, run] : kRecordVerbs) verbs.push_back(name);
    std::sort(verbs.begin(), verbs.end());  // the nearest of equals: the first in order
    const auto near = nearest_word(verb, verbs);
    return quarantine_error("unknown verb '" + verb + "'" + (near ? "; did you mean '" + *near + "'?" : "") +
                                " (list, show, stats, export, discard, allow, purge, replay, import, patch)",
                            kExitUsage);
  }
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 3, options_of(verb), "quarantine " + verb, quarantine_verb_help(verb),
                            exit_code, "quarantine");
  if (!args) return exit_code;
  if (args->has_dashdash() && verb != "replay" && verb != "import") return quarantine_error("unexpected '--'", kExitUsage);
  const bool takes_ids = verb == "show" || verb == "export" || verb == "discard" || verb == "replay" ||
                         verb == "import" || verb == "patch" || verb == "allow";
  if (!takes_ids && !args->positional().empty()) {
    return quarantine_error("unexpected argument '" + args->positional()[0] + "'", kExitUsage);
  }
  if ((verb == "show" || verb == "export") && args->positional().size() != 1) {
    return quarantine_error(verb + " takes exactly one record ID", kExitUsage);
  }
  const bool on_fleet =
      args->value("redis").has_value() || args->value("amqp").has_value() || args->value("kafka").has_value();
  // A verb this quarantine cannot do, said before it is read.
  if ((on_fleet && records_verb == kRecordVerbs.end()) || (verb == "patch" && !capabilities_of(*args).patches)) {
    return quarantine_error(broker::store_only_verb(verb), kExitUsage);
  }
  // Import adds records and may start a store; every other verb looks at one.
  auto opened = open_quarantine(
      *args, "--redis needs --stream NAME (the stream the workers read; its dead letters are NAME:dlq)",
      verb == "import", on_fleet ? refuse_store_options(*args) : Status::ok());
  if (!opened) return quarantine_error(opened.error(), exit_code_for(opened.error_code()));
  if (records_verb != kRecordVerbs.end()) return records_verb->second(RecordsContext{*args, *opened->source});
  StoreAccess& store = *opened->store;
  return found->second(QuarantineContext{*args, *store.quarantine, store.store.db()});
}

}  // namespace pillbox::cli
