#include "supervisor/cli/run_output.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "shared/base64.h"
#include "supervisor/classify/outcome_json.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox {
namespace {

std::string join_state(const std::vector<std::string>& state) {
  std::string s;
  for (const auto& f : state) s += (s.empty() ? "" : " < ") + f;
  return s;
}

std::string frame_text(const SymbolizedFrame& f) {
  std::ostringstream os;
  const auto slash = f.module.rfind('/');
  const std::string base = slash == std::string::npos ? f.module : f.module.substr(slash + 1);
  os << (f.function.empty() ? "??" : normalize_function(f.function)) << " (" << (base.empty() ? "?" : base) << "+0x" << std::hex
     << f.offset << ")";
  return os.str();
}

// For a terminal: anything a hostile child put in a message, a symbol name
// or a path (invalid UTF-8, escape sequences) is shown as '?'. In valid
// UTF-8 that includes the C1 controls (U+0080..U+009F, 0xC2 0x80..0x9F):
// U+009B is CSI, which terminals that decode C1 act on like ESC [. And the
// bidirectional controls (bidi_control_at).
std::string printable(std::string_view s) {
  const bool utf8 = is_valid_utf8(s);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (utf8 && c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      out += '?';
      ++i;  // valid UTF-8: a continuation byte follows, 0x80 or more
    } else if (const std::size_t n = utf8 ? bidi_control_at(s.substr(i)) : 0; n > 0) {
      out += '?';  // it would reorder the rest of the line
      i += n - 1;
    } else if (c < 0x20 || c == 0x7f || (!utf8 && c >= 0x80)) {
      out += '?';
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

std::string outcome_json(const Task& task, const Outcome& o, const std::string* output_file, const Verdict* verdict) {
  using nlohmann::json;
  json j;
  j["key"] = task.key;
  j["status"] = o.kind == Kind::kOk ? "ok" : "failed";
  put_outcome_record(outcome_record(o), j);
  if (!o.frames.empty()) {
    json frames = json::array();
    for (std::size_t i = 0; i < o.frames.size() && i < 16; ++i) frames.push_back(frame_text(o.frames[i]));
    j["frames"] = frames;
  }
  if (o.kind == Kind::kOk) {
    if (output_file != nullptr) {
      j["output_file"] = *output_file;
    } else if (is_valid_utf8(o.output)) {
      j["output"] = o.output;
    } else {
      j["output_b64"] = base64_encode(o.output);
    }
  }
  if (verdict != nullptr) {
    j["verdict"] = std::string(to_string(verdict->type));
    j["attempts"] = verdict->attempts;
    if (verdict->record_id != 0) j["quarantine_id"] = verdict->record_id;
    if (verdict->type != Verdict::Type::kOk) j["verdict_reason"] = verdict->reason;
  }
  // Strings may carry bytes a hostile child chose (messages, symbol names,
  // module paths): invalid UTF-8 becomes U+FFFD instead of an exception.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_json_line(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string outcome_line(const Task& task, const Outcome& o, const Verdict* verdict) {
  std::ostringstream os;
  std::string kind(to_string(o.kind));
  kind.resize(std::max<std::size_t>(kind.size(), 17), ' ');
  os << kind << " " << printable(task.key);
  if (o.kind == Kind::kOk) {
    os << "  (" << o.wall_ms << " ms)";
  } else {
    os << "  " << o.fingerprint;
    if (!o.crash_state.empty()) os << "  " << printable(join_state(o.crash_state));
    if (!o.message.empty()) os << "  " << printable(cut_at_word(o.message, 200));
  }
  if (verdict != nullptr && (verdict->type != Verdict::Type::kOk || verdict->attempts > 1)) {
    os << "  -> " << to_string(verdict->type);
    if (verdict->record_id != 0) os << " #" << verdict->record_id << (verdict->folded ? " (repeat; store full)" : "");
    os << " after " << verdict->attempts << " attempt" << (verdict->attempts == 1 ? "" : "s");
  }
  return os.str();
}

void RunSummary::add(const Task& task, const Outcome& o) {
  ++total_;
  ++by_kind_[o.kind];
  if (o.kind == Kind::kOk) {
    if (o.output.empty()) ++ok_empty_;
    return;
  }
  ++failed_;
  Group& g = by_fingerprint_[o.fingerprint];
  if (g.count++ == 0) {
    g.kind = o.kind;
    g.crash_state = printable(join_state(o.crash_state));
    g.example_key = printable(cut_at_word(task.key, 200));
    g.message = printable(cut_at_word(o.message, 120));
  }
}

void RunSummary::remove(const Outcome& o) {
  if (total_ > 0) --total_;
  if (auto k = by_kind_.find(o.kind); k != by_kind_.end() && --k->second == 0) by_kind_.erase(k);
  if (o.kind == Kind::kOk) {
    if (o.output.empty() && ok_empty_ > 0) --ok_empty_;
    return;
  }
  if (failed_ > 0) --failed_;
  if (auto g = by_fingerprint_.find(o.fingerprint); g != by_fingerprint_.end() && --g->second.count == 0) {
    by_fingerprint_.erase(g);
  }
}

std::string RunSummary::render(double seconds, const RunReport& report, const FlowReport* flow,
                               const std::string& store_dir) const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "pillbox: " << total_ << " task" << (total_ == 1 ? "" : "s") << " in " << seconds << " s";
  if (seconds > 0) os << " (" << static_cast<double>(total_) / seconds << "/s)";
  os << ": " << (total_ - failed_) << " ok";
  if (ok_empty_ > 0) os << " (" << ok_empty_ << " of them with empty output)";
  os << ", " << failed_ << " failed";
  const std::size_t input_errors = report.input_errors + (flow ? flow->input_errors : 0);
  if (input_errors) os << ", " << input_errors << " input error(s)";
  os << "\n";
  if (ok_empty_ > 1 && ok_empty_ == total_ - failed_) {
    // Every task "worked" and printed nothing: a command that ignores its
    // input, writes its result to a file, or reads the wrong thing.
    os << "  hint: no ok task printed anything on stdout, which is what a task's result is; does the "
          "command read its input ({} is the payload's file, stdin otherwise) and print its result?\n";
  }
  if (flow != nullptr) {
    os << "  store: " << (store_dir.empty() ? "none (--no-store): nothing kept, nothing resumed" : store_dir) << "\n";
    os << "  verdicts: " << flow->quarantined << (store_dir.empty() ? " poison" : " quarantined");
    if (flow->new_fingerprints) os << " (" << flow->new_fingerprints << " new fingerprints)";
    os << ", " << flow->retried << " needed retries, " << flow->gave_up << " gave up";
    if (flow->held) {
      os << ", " << flow->held
         << (flow->stopped_for_setup.empty() ? " held by a suspected outage" : " held (the command's setup fails)")
         << " (they run again next time)";
    }
    if (flow->taken_back) {
      os << ", " << flow->taken_back << " poison verdict" << (flow->taken_back == 1 ? "" : "s")
         << " taken back (a suspected outage explained the failure)";
    }
    if (flow->verified_bursts) {
      os << ", " << flow->verified_bursts << " failure" << (flow->verified_bursts == 1 ? "" : "s")
         << " of many payloads alike shown to be theirs (bad inputs together, not an outage)";
    }
    if (flow->released_bursts) {
      os << ", " << flow->released_bursts << " failure" << (flow->released_bursts == 1 ? "" : "s")
         << " of many payloads alike shown not to be theirs (they ran again)";
    }
    os << "\n";
    if (flow->stopped_by_breaker && !flow->stopped_for_hidden.empty()) {
      const std::string dir = share_for(flow->stopped_for_hidden);
      os << "  stopped: tasks could not see " << flow->stopped_for_hidden << ", which this host has"
         << (dir.empty() ? std::string() : "; run again with --share " + dir + " to let them read it")
         << "; the rest of the input was not read (a run over the same inputs and store goes on from here)\n";
    } else if (!flow->stopped_for_setup.empty()) {
      os << "  stopped: " << flow->stopped_for_setup << "; the rest of the input was not read (fix the command; a "
         << "run over the same inputs and store runs them all)\n";
    } else if (flow->stopped_by_breaker) {
      os << "  stopped: the handler outage lasted longer than --breaker-max-wait; the rest of the input was not "
            "read (a run over the same inputs and store goes on from here)\n";
    }
    if (flow->skipped_done || flow->skipped_quarantined) {
      os << "  skipped: " << flow->skipped_done << " already ok and " << flow->skipped_quarantined
         << " already quarantined in this store (--rerun runs the ok ones again)\n";
    }
    if (flow->done_outdated) {
      os << "  versions: " << flow->done_outdated << " of the tasks already ok ran under another version of "
         << flow->outdated_scripts << " (edited since); --rerun-outdated runs them again with this one\n";
    }
    if (flow->reran_outdated) {
      os << "  versions: " << flow->reran_outdated << " task" << (flow->reran_outdated == 1 ? "" : "s")
         << " ok under another version of " << flow->outdated_scripts << " ran again (--rerun-outdated)\n";
    }
    if (flow->done_from_replay) {
      os << "  results: " << flow->done_from_replay << " of the tasks already ok were resolved by `pillbox quarantine "
         << "replay`: what was written for them is the replay's output (pillbox results says which record)\n";
    }
    if (flow->done_without_result) {
      os << "  results: " << flow->done_without_result << " task" << (flow->done_without_result == 1 ? "" : "s")
         << " already ok had no kept result to write to --out (not kept, evicted or too large for "
            "--keep-results); --rerun runs them again\n";
    }
    if (flow->running_elsewhere) {
      os << "  skipped: " << flow->running_elsewhere << " running elsewhere (another live pillbox process on this store "
         << "runs them, or one of another host; their verdicts are its own: pillbox tasks shows who, and "
         << "pillbox tasks --release-claims HOST forgets the claims of a host whose runs are gone)\n";
    }
  }
  if (!by_kind_.empty()) {
    os << "  by kind:";
    for (const auto& [kind, n] : by_kind_) os << "  " << to_string(kind) << " " << n;
    os << "\n";
  }
  if (!by_fingerprint_.empty()) {
    std::vector<std::pair<std::string, Group>> groups(by_fingerprint_.begin(), by_fingerprint_.end());
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
    os << "  by fingerprint:\n";
    for (const auto& [fp, g] : groups) {
      os << "    " << fp << "  " << to_string(g.kind) << "  x" << g.count << "  "
         << (g.crash_state.empty() ? g.message : g.crash_state) << "  (e.g. " << g.example_key << ")\n";
    }
  }
  for (const auto& w : report.warnings) os << "  warning: " << w << "\n";
  return os.str();
}

}  // namespace pillbox
