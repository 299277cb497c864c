// pillbox results [KEY...] [--store DIR] [-o DIR] [--json]: the results of ok
// tasks the store kept (supervisor/store/result_store.h), read back.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shared/base64.h"
#include "supervisor/broker/fleet_results.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/stream_protocol.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/io/result_files.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/store/quarantine_json.h"
#include "supervisor/store/result_store.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox results [KEY...] [--store DIR] [-o DIR] [--json] [-- KEY...]   (after --: keys that start with -)\n"
    "       pillbox results [KEY...] --redis URL --stream NAME [-o DIR] [--json]\n"
    "\n"
    "The results of tasks that ended ok, as `pillbox run` kept them in the store (--keep-results,\n"
    "default 256M, the oldest evicted first). A task a `quarantine replay` resolved has the\n"
    "replay's output as its result, marked \"from replay of record N\" (or \"from patch R of\n"
    "record N\" when the record's patch ran).\n"
    "\n"
    "Without KEY: every result the store knows of, oldest task first: one line each (key, size,\n"
    "when, and whether it is kept, evicted, or was too large to keep).\n"
    "With KEY: the results of the tasks with that key (any handler, any payload). One KEY with one\n"
    "kept result and neither -o nor --json: its bytes on stdout, as they are (on a terminal only\n"
    "when they are printable text; else redirect, or use -o or --json).\n"
    "\n"
    "options:\n"
    "  --store DIR         the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                      ~/.local/state/pillbox)\n"
    "  -o, --out DIR       write each kept result to DIR/NAME.out, named as `run --out` names them\n"
    "                      (a key that came with several payloads: the later ones NAME~HASH.out)\n"
    "  --out-mode MODE     permissions of those files, octal (default 0600)\n"
    "  --redis URL --stream NAME\n"
    "                      a fleet's results instead: what its workers wrote to NAME:results, the\n"
    "                      newest per key (a key run again, or redriven by a replay: its last run);\n"
    "                      in JSON, entry, worker and redrive_of in place of payload_sha256 and\n"
    "                      from. NAME:results is not signed: it holds what was written to it\n"
    "  --json              one JSON object per result: key, payload_sha256, size, kept_at, result\n"
    "                      (kept | evicted | too-large), from (run | replay | patch: a `quarantine\n"
    "                      replay` that resolved the task's record quarantine_id, from its own\n"
    "                      payload or from its patch's revision) and, when kept, output (UTF-8\n"
    "                      text) or output_b64 (anything else), or output_file with -o\n"
    "\n"
    "exit codes: 0 every result asked for was written (without KEY: the listing was printed), 1 a\n"
    "            KEY's result was not kept (evicted, too large: `pillbox run --rerun`, or for a\n"
    "            replay's `pillbox quarantine replay ID --force`, makes it again; on a fleet: over\n"
    "            --results-max-output, or no result there), 2 usage error or a KEY no task has,\n"
    "            3 the store or Redis cannot be read\n";

int fail(const std::string& message, int code) { return command_error("results", message, code); }

std::string why_not_kept(const store::StoredResult& r) {
  if (r.status == store::ResultStatus::kEvicted) {
    return "evicted (" + std::to_string(r.size) + " bytes) to stay within --keep-results";
  }
  if (r.origin.from_replay()) {
    return "not kept: " + std::to_string(r.size) + " bytes, over the " +
           std::to_string(store::kDefaultKeepResultBytes >> 20) + " MiB a replay keeps of one result";
  }
  return "not kept: " + std::to_string(r.size) + " bytes, larger than --keep-results";
}

// How to make a result that is not kept again: run the task again, or, when
// a replay made it, that replay (a run would run the payload that failed).
std::string remake_hint(const store::StoredResult& r) {
  if (r.origin.from_replay()) {
    return "`pillbox quarantine replay " + std::to_string(r.origin.record_id) + " --force` makes it again";
  }
  return "`pillbox run --rerun` makes it again";
}

// Printable text a terminal shows as it is: valid UTF-8 without control
// bytes other than newline and tab (table_cell turns those into '?').
bool safe_for_terminal(const std::string& bytes) {
  if (!is_valid_utf8(bytes)) return false;
  std::string without_layout = bytes;
  for (char& c : without_layout) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return table_cell(without_layout, without_layout.size() + 1) == without_layout;
}

// A kept result's bytes in a JSON object: output (UTF-8 text) or output_b64,
// or output_file when written to -o.
void put_output(nlohmann::json& j, const std::string& bytes, const std::string& file, bool to_files) {
  if (to_files) {
    if (!file.empty()) j["output_file"] = file;
  } else if (is_valid_utf8(bytes)) {
    j["output"] = bytes;
  } else {
    j["output_b64"] = base64_encode(bytes);
  }
}

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

class Printer {
 public:
  Printer(bool json, ResultFiles* out) : json_(json), out_(out) {}

  // A store's result; false when its bytes are not kept.
  bool print(const store::StoredResult& r) {
    // The first payload of a key gets the key's own name, later ones their
    // payload hash, as `run --out` names them (tasks are numbered in the
    // order their input came).
    auto [first, inserted] = first_payload_.try_emplace(r.key, r.payload_sha256);
    const bool kept = r.status == store::ResultStatus::kKept;
    const bool replayed = r.origin.from_replay();
    nlohmann::json j{{"payload_sha256", r.payload_sha256},
                     {"result", std::string(store::to_string(r.status))},
                     {"from", !replayed ? "run" : r.origin.revision > 0 ? "patch" : "replay"}};
    if (replayed) {
      j["quarantine_id"] = r.origin.record_id;
      if (r.origin.revision > 0) j["revision"] = r.origin.revision;
    }
    const std::string_view variant =
        inserted || first->second == r.payload_sha256 ? std::string_view{} : result_variant(r.payload_sha256);
    const std::string reason = kept ? "" : why_not_kept(r);
    return print_row(&r.key, kept ? &r.data : nullptr, r.size, r.created_at, variant, std::move(j), reason, reason,
                     replayed ? "  from " + store::describe(r.origin) : "");
  }
  // A fleet's result (NAME:results); false when its bytes are not there.
  bool print(const broker::FleetResult& r) {
    nlohmann::json j{{"entry", r.entry}, {"worker", r.worker}, {"result", r.output ? "kept" : "not-kept"}};
    if (!r.redrive_of.empty()) j["redrive_of"] = r.redrive_of;
    // An entry that is not a result is named by its id, outside the key column's words.
    const std::string shown = table_cell(r.has_key ? r.why_not : "entry " + r.entry + ": " + r.why_not, 300);
    return print_row(r.has_key ? &r.key : nullptr, r.output ? &*r.output : nullptr, r.size, r.at_ms, {}, std::move(j),
                     r.why_not, shown, "");
  }
  bool write_errors() const { return write_errors_; }

 private:
  // A row of either back end, `j` holding the back end's own JSON fields:
  // `key` null for an entry that is not a result, `data` null when the bytes
  // are not kept (`reason` says why in JSON, `shown` in the table), `from`
  // the table's note of what made the result.
  bool print_row(const std::string* key, const std::string* data, std::int64_t size, std::int64_t at_ms,
                 std::string_view variant, nlohmann::json j, const std::string& reason, const std::string& shown,
                 const std::string& from) {
    std::string file;
    if (data != nullptr && out_ != nullptr && key != nullptr) {
      file = write_result_file(*out_, *key, *data, "results", write_errors_, variant);
    }
    if (json_) {
      j["key"] = key != nullptr ? nlohmann::json(*key) : nlohmann::json(nullptr);
      j["size"] = size;
      j["kept_at"] = iso_time(at_ms);
      if (data != nullptr) put_output(j, *data, file, out_ != nullptr);
      else j["reason"] = reason;
      print_json(j);
    } else {
      std::printf("%-40s %10lld  %s  %s%s%s\n", key != nullptr ? table_cell(*key, 200).c_str() : "-",
                  static_cast<long long>(size), iso_time(at_ms).c_str(), data != nullptr ? "kept" : shown.c_str(),
                  from.c_str(), file.empty() ? "" : ("  -> " + table_cell(file, 400)).c_str());
    }
    return data != nullptr;
  }

  bool json_;
  ResultFiles* out_;  // not owned; null without -o
  bool write_errors_ = false;
  std::map<std::string, std::string> first_payload_;  // key -> payload hash of its first result
};

// One KEY, one kept result, no -o, no --json: the bytes themselves.
int write_raw(const store::StoredResult& r) {
  if (::isatty(STDOUT_FILENO) == 1 && !safe_for_terminal(r.data)) {
    return fail("the result of '" + table_cell(r.key, 200) + "' (" + std::to_string(r.size) +
                    " bytes) is not printable text: redirect stdout to a file, or use -o DIR or --json",
                kExitUsage);
  }
  if (std::fwrite(r.data.data(), 1, r.data.size(), stdout) != r.data.size() || std::fflush(stdout) != 0) {
    return fail("cannot write to stdout", kExitSetup);
  }
  return kExitOk;
}

// --redis URL --stream NAME: the newest result of each key on NAME:results.
int fleet_results(const Args& args, const std::vector<std::string>& keys, Printer& printer, bool with_data) {
  auto fleet = read_fleet_target(args, "--redis needs --stream NAME (the fleet's task stream)");
  if (!fleet) return fail(fleet.error(), exit_code_for(fleet.error_code()));
  auto redis = broker::RedisConnection::open(fleet->address);
  if (!redis) return fail(redis.error(), kExitSetup);
  const std::string& stream = fleet->stream;
  const std::string results_key = broker::stream_keys(stream).results;
  const std::set<std::string> wanted(keys.begin(), keys.end());
  std::set<std::string> found;
  std::size_t seen = 0;
  std::vector<broker::FleetResult> one;  // a single KEY without -o or --json: its bytes, raw
  const bool raw = keys.size() == 1 && !with_data;
  bool not_kept = false;
  // As for a store: with KEYs, exit 1 unless each one's result was written;
  // a listing of all of them exits 0 and says, line by line, what is not kept.
  auto s = broker::each_newest_result(*redis, results_key, wanted, [&](const broker::FleetResult& r) {
    ++seen;
    if (r.has_key) found.insert(r.key);
    if (raw) one.push_back(r);
    else if (!printer.print(r) && !keys.empty()) not_kept = true;
    return Status::ok();
  });
  std::fflush(stdout);
  if (!s) return fail(s.message(), kExitSetup);
  if (raw && !one.empty() && one.front().output) {
    store::StoredResult r;
    r.key = one.front().key;
    r.size = one.front().size;
    r.data = *one.front().output;
    return write_raw(r);
  }
  for (const auto& r : one) {
    if (!printer.print(r)) not_kept = true;
  }
  for (const std::string& key : keys) {
    if (found.count(key) > 0) continue;
    std::fprintf(stderr,
                 "pillbox results: no result with key '%s' on %s (not run yet, failed: pillbox quarantine list "
                 "--redis URL --stream %s, or trimmed by --results-maxlen)\n",
                 table_cell(key, 200).c_str(), results_key.c_str(), stream.c_str());
    not_kept = true;
  }
  if (keys.empty() && seen == 0 && !args.flag("json")) {
    std::fprintf(stderr, "pillbox results: no results on %s\n", results_key.c_str());
  }
  if (printer.write_errors()) return kExitUsage;
  return not_kept ? kExitFailures : kExitOk;
}

}  // namespace

int results_command(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {{"store"},         {"out", true, false, 'o'}, {"out-mode"}, {"json", false},
                                         {"redis"},         {"stream"},               {"help", false}};
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, specs, "results", kHelp, exit_code);
  if (!args) return exit_code;
  auto out = read_result_files(*args);
  if (!out) return fail(out.error(), kExitUsage);
  std::optional<ResultFiles> files = std::move(*out);
  const bool json = args->flag("json");
  Printer printer(json, files ? &*files : nullptr);
  const bool with_data = json || files.has_value();
  // KEYs: the positionals, and every word after `--` (a key may start with '-').
  std::vector<std::string> keys = args->positional();
  keys.insert(keys.end(), args->after_dashdash().begin(), args->after_dashdash().end());
  if (args->value("redis")) return fleet_results(*args, keys, printer, with_data);
  if (args->value("stream")) return fail("--stream goes with --redis URL (a fleet's results)", kExitUsage);
  auto opened = open_existing_store(*args);
  if (!opened) return fail(opened.error(), exit_code_for(opened.error_code()));
  StoreAccess& access = **opened;
  auto results = store::ResultStore::open(access.store.db());
  if (!results) return fail(results.error(), kExitSetup);

  if (keys.empty()) {
    std::size_t count = 0;
    auto s = results->for_each(with_data, [&](const store::StoredResult& r) {
      printer.print(r);
      ++count;
      return Status::ok();
    });
    std::fflush(stdout);
    if (!s) return fail(s.message(), kExitSetup);
    if (count == 0 && !json) std::fprintf(stderr, "pillbox results: no results in %s\n", access.store.dir().c_str());
    return printer.write_errors() ? kExitUsage : kExitOk;
  }

  // Each KEY: its result rows, or why there are none.
  bool unknown = false;
  bool not_kept = false;
  std::vector<std::vector<store::StoredResult>> found;
  for (const std::string& key : keys) {
    auto rows = results->with_key(key, true);
    if (!rows) return fail(rows.error(), kExitSetup);
    if (rows->empty()) {
      auto states = results->task_states(key);
      if (!states) return fail(states.error(), kExitSetup);
      const std::string shown = table_cell(key, 200);
      if (states->empty()) {
        std::fprintf(stderr, "pillbox results: no task with key '%s' in %s\n", shown.c_str(),
                     access.store.dir().c_str());
        unknown = true;
      } else if (std::find(states->begin(), states->end(), "ok") != states->end()) {
        std::fprintf(stderr,
                     "pillbox results: '%s': ok, but its result was not kept (what made it ok kept none: a run "
                     "with --keep-results 0, or an older pillbox's run or replay); `pillbox run --rerun` makes "
                     "it again\n",
                     shown.c_str());
        not_kept = true;
      } else {
        std::fprintf(stderr, "pillbox results: '%s' has no result: its task is %s, not ok\n", shown.c_str(),
                     states->front().c_str());
        not_kept = true;
      }
    }
    found.push_back(std::move(*rows));
  }
  if (keys.size() == 1 && found.front().size() == 1 && !with_data) {
    const store::StoredResult& r = found.front().front();
    if (r.status == store::ResultStatus::kKept) return write_raw(r);
  }
  for (const auto& rows : found) {
    for (const auto& r : rows) {
      if (!printer.print(r)) {
        not_kept = true;
        std::fprintf(stderr, "pillbox results: '%s': %s; %s\n", table_cell(r.key, 200).c_str(),
                     why_not_kept(r).c_str(), remake_hint(r).c_str());
      }
    }
  }
  std::fflush(stdout);
  if (unknown || printer.write_errors()) return kExitUsage;
  return not_kept ? kExitFailures : kExitOk;
}

}  // namespace pillbox::cli
