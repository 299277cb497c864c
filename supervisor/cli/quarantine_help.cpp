#include "supervisor/cli/quarantine_help.h"

#include <map>

namespace pillbox::cli {
namespace {

#define PILLBOX_FILTERS                                                                              \
  "filters:\n"                                                                                       \
  "  --status S        quarantined | allowed | replaying | resolved | failed-again | discarded\n"    \
  "  --kind K          crash, cpu-limit, oom, ... (see README: failure kinds)\n"                     \
  "  --fingerprint FP  one fingerprint\n"                                                            \
  "  --key KEY         one task key\n"                                                               \
  "  --since WHEN      created since an age ago (24h, 1.5d) or a UTC date (2026-11-30[T12:00:00Z])\n" \
  "  --source S        run | fuzz (found by pillbox fuzz) | import (pillbox quarantine import)\n"              \
  "  --raise-site RS   one raise site, by the id stats shows (rs-...)\n"

#define PILLBOX_WHERE                                                                                    \
  "  --store DIR       the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"         \
  "                    ~/.local/state/pillbox); also accepted before the command: pillbox --store DIR\n" \
  "  --redis URL --stream NAME\n"                                                                        \
  "                    the fleet's quarantine instead (the dead letters in NAME:dlq; see pillbox\n"      \
  "                    quarantine --help)\n"                                                               \
  "  --amqp URL --queue NAME\n"                                                                          \
  "                    the fleet's quarantine on RabbitMQ (the dead letters in the stream NAME.dlq,\n"  \
  "                    their offsets as IDs): list, show, stats, export, discard, allow, replay, patch\n"     \
  "  --kafka BROKERS --topic T\n"                                                                        \
  "                    the fleet's quarantine on Kafka (the dead letters in the topic T.dlq,\n"        \
  "                    PARTITION@OFFSET as IDs): list, show, stats, export, discard, allow, replay,\n"   \
  "                    patch\n"                                                                            \
  "  --fleet-key FILE  with --redis, --amqp or --kafka: the key the workers sign dead letters with\n"  \
  "                    (default $PILLBOX_FLEET_KEY): each record's signature is said valid, missing\n"   \
  "                    or bad\n"

#define PILLBOX_STORE_ONLY                                                                              \
  "  --store DIR       the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"        \
  "                    ~/.local/state/pillbox); also accepted before the command: pillbox --store DIR\n"

const std::map<std::string, const char*> kVerbHelp = {
    {"list",
     "usage: pillbox quarantine list [filters] [--limit N] [--offset N] [--json] [--store DIR | --redis URL --stream NAME]\n"
     "\n"
     "Records, newest first: a table, or with --json one JSON object per line (the fields of\n"
     "`quarantine show --json`, without the attempts and the audit trail).\n"
     "\n" PILLBOX_FILTERS
     "\n"
     "options:\n"
     "  --limit N         at most N records\n"
     "  --offset N        skip the first N\n"
     "  --json            one JSON object per record\n" PILLBOX_WHERE},
    {"show",
     "usage: pillbox quarantine show ID [--json] [--store DIR | --redis URL --stream NAME]\n"
     "\n"
     "Everything in one record: crash state, resource usage, every attempt, the audit trail, and\n"
     "a preview of the payload that is safe for a terminal; with --json, one JSON object.\n"
     "\n"
     "options:\n"
     "  --json            the record as one JSON object\n" PILLBOX_WHERE},
    {"stats",
     "usage: pillbox quarantine stats [filters] [--json] [--store DIR | --redis URL --stream NAME]\n"
     "\n"
     "Records grouped by fingerprint and kind, with counts and first and last seen. Groups raised\n"
     "at one place (a traceback's exception and innermost frame, a crash's innermost frame) but\n"
     "reached through other callers (one program's) follow the table as one raise site, with the\n"
     "id that selects them: --raise-site RS (list, stats, replay, discard).\n"
     "\n" PILLBOX_FILTERS
     "\n"
     "options:\n"
     "  --json            one JSON object per group; a store's groups have \"by_day\": the\n"
     "                    group's records (of those the filters select) created on each of\n"
     "                    the last 14 days (UTC), oldest first, today last, as\n"
     "                    [{\"day\": \"YYYY-MM-DD\", \"records\": N}, ...]; a repeat folded into\n"
     "                    a record (\"repeats\") has no time of its own and is not in it; every\n"
     "                    group has \"raise_site\" and \"raise_site_id\" (null: none) and\n"
     "                    \"raise_site_groups\", how many of the groups share it\n" PILLBOX_WHERE},
    {"export",
     "usage: pillbox quarantine export ID -o FILE [--bundle] [--minimized | --revision N] [--force] [--json]\n"
     "                                 [--store DIR | --redis URL --stream NAME]\n"
     "\n"
     "The exact payload bytes to FILE (- for stdout when it is not a terminal). With --bundle,\n"
     "FILE is a new directory holding the payload, the policy, the record and reproduce.sh, a\n"
     "command line that runs it again the same way.\n"
     "\n"
     "options:\n"
     "  -o, --output FILE where to write (a directory with --bundle)\n"
     "  --bundle          a directory: payload, policy, record, reproduce.sh\n"
     "  --minimized       the payload `pillbox minimize` made, not the original\n"
     "  --revision N      the payload of revision N (quarantine patch), not the original; the\n"
     "                    store only, not with --bundle\n"
     "  --force           replace FILE when it exists\n"
     "  --json            on stdout, one JSON object: {\"id\", \"output\", \"bytes\", \"sha256\",\n"
     "                    \"bundle\", \"minimized\", \"revision\"} (not with -o -; revision: null for\n"
     "                    the original)\n" PILLBOX_WHERE},
    {"discard",
     "usage: pillbox quarantine discard (ID... | --raise-site RS) --reason TEXT [--json]\n"
     "                                  [--store DIR | --redis URL --stream NAME]\n"
     "\n"
     "Marks records as handled without a fix; the reason goes into the audit trail. Every ID is\n"
     "checked before any record changes. A record being replayed is refused.\n"
     "\n"
     "options:\n"
     "  --reason TEXT     why (required)\n"
     "  --raise-site RS   the open records of raise site RS (quarantine stats shows the ids; the\n"
     "                    store only: on the fleet, name the IDs)\n"
     "  --json            on stdout, one JSON object: {\"discarded\": [{\"id\", \"was\"}...],\n"
     "                    \"already_discarded\": [ID...], \"changed\": N}\n" PILLBOX_WHERE},
    {"allow",
     "usage: pillbox quarantine allow (ID... | --fingerprint FP | --kind K | --raise-site RS) [--revoke]\n"
     "                                [--note TEXT] [--json] [--store DIR | --redis URL --stream NAME |\n"
     "                                --amqp URL --queue NAME | --kafka BROKERS --topic T]\n"
     "                                [--fleet-key FILE]\n"
     "\n"
     "An operator's review: records awaiting review (quarantined, failed-again) become allowed,\n"
     "allowed to replay; `quarantine replay --allowed` then replays those and no other. With\n"
     "--revoke, allowed records go back to quarantined, awaiting review again. Who and when go into\n"
     "the audit trail (action \"allowed\" or \"allowance revoked\", with the note and the status\n"
     "before). Named IDs are all checked before any record changes: one resolved, discarded or\n"
     "being replayed is refused, with why, and nothing changes; one already allowed (for --revoke:\n"
     "not allowed) is left as it is. With --fingerprint, --kind and/or --raise-site, the matching\n"
     "records the review moves, and how many others were left, on stderr. A patch (quarantine patch)\n"
     "of an allowed record sends it back to review: what a replay would run has changed.\n"
     "On the fleet (--redis, --amqp, --kafka) the allowance is signed with the fleet key\n"
     "(--fleet-key FILE or $PILLBOX_FLEET_KEY), over the record's id, its payload's sha256, who and\n"
     "when: its state is anyone's to write who can write to the broker, so replay --allowed takes a\n"
     "record only on a valid allowance (unless --trust-unsigned); show --json says it (\"allowance\").\n"
     "\n"
     "options:\n"
     "  --revoke          take allowances back: allowed records to quarantined\n"
     "  --note TEXT       why, kept in the audit trail\n"
     "  --fingerprint FP, --kind K, --raise-site RS   the records they match (combined: all of them)\n"
     "  --json            on stdout, one JSON object: {\"allowed\": [{\"id\", \"was\"}...],\n"
     "                    \"already_allowed\": [ID...], \"changed\": N}; with --revoke {\"revoked\":\n"
     "                    [{\"id\", \"was\"}...], \"not_allowed\": [ID...], \"changed\": N}\n" PILLBOX_WHERE},
    {"purge",
     "usage: pillbox quarantine purge --older-than DURATION [--status S]... [--dry-run] [--yes] [--json]\n"
     "                                [--store DIR]\n"
     "\n"
     "Deletes records created more than DURATION ago (e.g. 30d, 12h, 1.5d), only those in the given\n"
     "statuses when --status is given, with their audit trail; payloads no remaining record uses go\n"
     "too. Records still open (quarantined, allowed, replaying, failed-again) are deleted only when\n"
     "confirmed: on a terminal the question `delete N open records? [y/N]`; without one, --yes\n"
     "(else exit 2 and nothing is deleted).\n"
     "\n"
     "options:\n"
     "  --older-than D    age of the records to delete (required)\n"
     "  --status S        only records in status S (repeatable)\n"
     "  -n, --dry-run     show what would be deleted; delete nothing\n"
     "  --yes             delete open records without asking\n"
     "  --json            on stdout, one JSON object: {\"dry_run\", \"records\", \"open_records\",\n"
     "                    \"payloads\", \"ids\"} (payloads: null with --dry-run)\n" PILLBOX_STORE_ONLY},
    {"replay",
     "usage: pillbox quarantine replay (ID... | --fingerprint FP | --kind K | --raise-site RS | --all) [options]\n"
     "       pillbox quarantine replay --allowed [ID... | --fingerprint FP | --kind K | --raise-site RS] [options]\n"
     "                                 [--handler H [--arg K=V]... | -- CMD ARGS...]\n"
     "\n"
     "Runs quarantined payloads again, oldest first, in batches: under their recorded handler and\n"
     "policy, or a new one (--handler H [--arg K=V]... | -- CMD ARGS..., --policy P). Successes\n"
     "become resolved and their tasks ok, with the replay's output as their kept result (`pillbox\n"
     "results`); failures failed-again (the attempt is appended); what is not replayed keeps\n"
     "its status. It takes records quarantined, failed-again and allowed; with --allowed only those\n"
     "an operator allowed (quarantine allow). Records resolved, discarded or being replayed are\n"
     "skipped unless --force; two replays at once never run the same record. Results go where\n"
     "`run` puts them (stdout, --json, --out DIR with the file names and --out-mode of `run`). A\n"
     "record patched by `quarantine patch` runs its newest revision (payload and handler\n"
     "arguments) under its own key; the result and the audit trail name the revision.\n"
     "A record's policy and handler are claims (docs/security.md): it runs under the shipped policy\n"
     "its own derives from; a raised limit or a host path it binds only when said again here\n"
     "(--timeout, --cpu, --memory, --max-output, --writable, --share), and a plugin record only\n"
     "under --handler: naming its own plugin (no --arg) keeps its recorded and patched arguments.\n"
     "\n"
     "options:\n"
     "  --batch N               records claimed and judged together (default 10)\n"
     "  --rate R                payloads started per second at most\n"
     "  --stop-after K          stop once K replays fail again with one fingerprint\n"
     "  --max-failure-ratio F   stop when more than F of a batch fails again (e.g. 0.2)\n"
     "  -n, --dry-run           show what would be replayed; change nothing (with --json: one JSON\n"
     "                          object {\"dry_run\": true, \"records\": [{\"id\", \"key\", \"kind\",\n"
     "                          \"fingerprint\", \"status\"}...], \"count\": N})\n"
     "  --force                 replay records resolved or being replayed too\n"
     "  --allowed               only records allowed to replay (quarantine allow); alone, all of\n"
     "                          them. On the fleet, only those with a valid allowance (signed with\n"
     "                          the fleet key), unless --trust-unsigned\n"
     "  -j, --jobs N            payloads at once (default: number of cores)\n"
     "  --json                  one JSON object per replayed payload, as `run --json`\n"
     "  -q, --quiet             no progress bar on the terminal\n"
     "  -o, --out DIR, --out-mode MODE   results to files, as for `run`\n"
     "  --batch-timeout D       with --redis, --amqp or --kafka: how long to wait for each batch\n"
     "                          (default 5m)\n"
     "\n"
     "On the fleet (--redis, --amqp, --kafka) the records go back to the workers and each batch's\n"
     "outcomes are waited for; --force also republishes a record whose earlier redrive has no outcome yet\n"
     "(--amqp: one lost with its message, NAME purged). On RabbitMQ a redrive keeps the record's\n"
     "message_id, correlation_id, reply_to and headers (its key) and adds pillbox-replay (the attempt\n"
     "id) and pillbox-replay-of (the record); results go where the workers put any. On Kafka a\n"
     "redrive is the record's key, value (or its patch's) and headers, with pillbox.replay naming\n"
     "the record; a lease in T.dlq.state keeps a second replay off it.\n" PILLBOX_WHERE
     "\n"
     "exit codes: 0 every replayed payload resolved, 1 some failed again or a stop condition ended\n"
     "it, 2 usage error or no such record, 3 the store, the broker or the sandbox cannot be used (also when\n"
     "a record's payload cannot be read: that record is left as it was, the others still run)\n"},
    {"import",
     "usage: pillbox quarantine import FILE|DIR... (--handler H [--arg K=V]... | -- CMD ARGS...) [options]\n"
     "\n"
     "Crash artifacts of coverage-guided fuzzers: libFuzzer's crash-*, oom-*, timeout-*, leak-* and\n"
     "slow-unit-* files, AFL++'s crashes/id:* and hangs/id:* (directories are searched, without\n"
     "following symlinks unless --follow-symlinks; files named on the command line are taken\n"
     "whatever their name; regular files only). Each runs once in the sandbox under the handler or\n"
     "command given; a failure becomes a record with source import and the file as its origin.\n"
     "An artifact that runs ok here is reported and not recorded (exit code 1); one that the\n"
     "sandbox could not start, or a signal from outside ended, is not recorded (exit 3).\n"
     "\n"
     "options:\n"
     "  --handler NAME, --arg K=V, --policy P, --timeout D, --cpu D, --memory S, --max-output S,\n"
     "  --writable PATH, --share PATH, --mode M   what runs and under which limits, as for `pillbox run`\n"
     "  -j, --jobs N      artifacts at once (default: number of cores)\n"
     "  --json            one JSON object per artifact\n"
     "  -q, --quiet       no progress bar on the terminal\n"
     "  --follow-symlinks in directories, read what symlinks point to\n" PILLBOX_STORE_ONLY},
    {"patch",
     "usage: pillbox quarantine patch ID (--payload-file F | --set-arg K=V...) --note TEXT [--json]\n"
     "                                [--store DIR | --redis URL --stream NAME | --amqp URL --queue NAME |\n"
     "                                --kafka BROKERS --topic T]\n"
     "\n"
     "A fix by hand: stores a new revision of the record's payload (--payload-file) or of its\n"
     "handler arguments (--set-arg, repeatable; the others are kept) beside the original, which\n"
     "never changes. Who, when, the note and what changed (e.g. \"payload 1234 -> 1180 bytes, ...\",\n"
     "\"arg mode: strict -> lenient\") go into the audit trail; `quarantine show` lists the\n"
     "revisions. `quarantine replay ID` then runs the newest revision under the record's own key\n"
     "and, if it succeeds, resolves the record (its audit entry names the revision) and its task:\n"
     "ok, with the revision's output as its result (`pillbox results KEY`: \"from patch N of\n"
     "record ID\"), so `run` over the same input skips it as done. The original payload is\n"
     "unchanged, and still fails (`pillbox reproduce ID`).\n"
     "\n"
     "On the fleet's quarantine (--redis, --amqp, --kafka) a patch is of the payload only: its tasks\n"
     "carry no handler arguments (the workers' --arg decides them), so --set-arg is refused. The\n"
     "revision is kept beside the dead letter (Redis: NAME:dlq:revisions:ID; RabbitMQ: the stream\n"
     "NAME.dlq.revisions; Kafka: the topic T.dlq.revisions, one partition, made by the operator)\n"
     "and named by the record's state, signed with the fleet key when there is one; replay redrives\n"
     "the newest revision to the workers, and with the key only a revision signed with it (else\n"
     "--trust-unsigned). Without a key a revision is as trusted as the state.\n"
     "\n"
     "An allowed record (quarantine allow) goes back to quarantined, awaiting review again: the\n"
     "allowance was of what it ran before.\n"
     "\n"
     "Refused, with nothing changed: a record resolved or discarded, one being replayed, --set-arg\n"
     "on an exec record (a command line, not handler arguments) or on the fleet, a patch equal to\n"
     "the newest revision, one that another patch beat to the record (on the fleet), a payload file\n"
     "that is not a readable regular file of at most 1 GiB.\n"
     "\n"
     "options:\n"
     "  --payload-file F  the new payload, exactly these bytes\n"
     "  --set-arg K=V     set handler argument K to V (repeatable; the store's records only)\n"
     "  --note TEXT       why (required; at most 4096 bytes)\n"
     "  --json            on stdout, one JSON object: {\"record_id\", \"n\", \"at\", \"actor\", \"note\",\n"
     "                    \"summary\", \"payload_sha256\", \"payload_size\", \"handler_args\"}\n" PILLBOX_WHERE
     "\n"
     "exit codes: 0 stored, 2 usage error, no such record, or a patch refused, 3 the store or the broker\n"
     "cannot be used\n"},
};

#undef PILLBOX_FILTERS
#undef PILLBOX_WHERE
#undef PILLBOX_STORE_ONLY

}  // namespace

const char* quarantine_verb_help(const std::string& verb) {
  const auto found = kVerbHelp.find(verb);
  return found == kVerbHelp.end() ? nullptr : found->second;
}

}  // namespace pillbox::cli
