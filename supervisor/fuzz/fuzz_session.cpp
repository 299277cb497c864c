#include "supervisor/fuzz/fuzz_session.h"

#include <csignal>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shared/fingerprint.h"
#include "shared/sha256.h"
#include "supervisor/fuzz/fuzz_corpus.h"
#include "supervisor/fuzz/inflight_journal.h"
#include "supervisor/fuzz/mutator.h"
#include "supervisor/ops/payload_runner.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/stop_signals.h"

namespace pillbox::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

// Runs whose outcome was "the sandbox could not start" in a row before the
// session gives up: that is a broken setup, not a finding.
constexpr int kMaxSandboxErrorsInARow = 20;
// Repeats are counted in memory and written at most this often (and at the
// end): a crasher's mutations mostly crash the same way, thousands per minute.
constexpr auto kRepeatFlushInterval = std::chrono::seconds(2);
// Candidates already run are remembered in a bitmap indexed by their hash,
// to skip exact repeats (small inputs mutate into each other often): 2^26
// bits, 8 MiB, however long the session. A collision skips a new candidate
// now and then (about 6 % of them after 4 million runs), never runs one twice.
constexpr std::size_t kTriedBits = std::size_t{1} << 26;

struct Candidate {
  std::string bytes;
  std::string seed;
  std::string seed_sha256;
  std::uint32_t generation = 0;
  std::string mutations;     // the lineage since the seed (CorpusEntry::lineage)
  std::uint64_t run = 0;
  std::int64_t started_ms = 0;
  std::string journal_file;  // a recovered candidate: its file in the journal
  std::string recovered_from;  // a recovered candidate: the session that died with it
};

class FuzzPlanner final : public PayloadPlanner {
 public:
  FuzzPlanner(FindingRecorder& recorder, const FuzzSettings& settings, FuzzResult& result, InFlightJournal* journal,
              std::vector<RecoveredCandidate> recovered)
      : recorder_(recorder),
        settings_(settings),
        result_(result),
        journal_(journal),
        recovered_(std::move(recovered)),
        mutator_(settings.rng_seed, settings.dictionary, settings.max_len),
        started_(Clock::now()),
        last_flush_(started_) {
    for (const auto& seed : settings.seeds) {
      Candidate c{seed.bytes, seed.name, sha256_hex(seed.bytes), 0, "", 0, 0, "", ""};
      pending_seeds_.push_back(std::move(c));
    }
    if (pending_seeds_.empty()) pending_seeds_.push_back({"", "empty input", sha256_hex(""), 0, "", 0, 0, "", ""});
  }

  // Before the first run: recovered candidates that already took pillbox
  // down while running alone kMaxSoloLosses times are recorded, not run.
  void record_lost_candidates() {
    std::vector<RecoveredCandidate> to_run;
    for (auto& r : recovered_) {
      if (r.solo_losses < kMaxSoloLosses) {
        to_run.push_back(std::move(r));
        continue;
      }
      Outcome o;
      o.kind = Kind::kSupervisorLost;
      o.message = "pillbox fuzz died while this candidate ran alone, " + std::to_string(r.solo_losses) +
                  " times; it is not run again";
      o.fingerprint = make_fingerprint(o.kind, "", {}, recorder_.identity().handler_identity);
      Candidate c = recovered_candidate(r);
      c.started_ms = store::now_ms();
      ++result_.recovered;
      ++result_.by_kind[std::string(to_string(o.kind))];
      settled_.insert(sha256_hex(c.bytes));
      // Recorded by its bytes, not counted on an open supervisor-lost record
      // of the handler: every payload that takes pillbox down is kept.
      note_failure(c, o, /*by_fingerprint=*/false);
      if (!error_.is_ok()) return;  // not recorded: the file stays for the next session
      journal_->remove_file(r.file);
    }
    recovered_ = std::move(to_run);
    for (const auto& r : recovered_) settled_.insert(sha256_hex(r.bytes));
  }

  std::optional<Task> next() override {
    if (!error_.is_ok() || !result_.stopped_by.empty()) return std::nullopt;
    if (settings_.max_runs > 0 && issued_ >= settings_.max_runs) {
      result_.stopped_by = "--max-runs";
      return std::nullopt;
    }
    if (settings_.max_time.count() > 0 && Clock::now() - started_ >= settings_.max_time) {
      result_.stopped_by = "--max-time";
      return std::nullopt;
    }
    // A recovered candidate runs alone: if pillbox dies again, it is the one.
    if (alone_in_flight_) return std::nullopt;
    Candidate c;
    if (recovered_index_ < recovered_.size()) {
      if (!in_flight_.empty()) return std::nullopt;
      const RecoveredCandidate& r = recovered_[recovered_index_++];
      auto file = journal_->mark_running_alone(r);
      if (!file) {
        error_ = Status::error(file.error());
        return std::nullopt;
      }
      c = recovered_candidate(r);
      c.journal_file = *file;
      remember(c.bytes);
      alone_in_flight_ = true;
      ++result_.recovered;
    } else if (next_seed(c)) {
      // Every seed runs once as it is, first: a seed that already fails is a finding.
      corpus_.add_seed({c.bytes, c.seed, c.seed_sha256, 0, ""});
      remember(c.bytes);
    } else if (!make_candidate(c)) {
      // Nothing new could be made (a tiny input space, all tried); with
      // nothing in flight either, the session ends here.
      if (in_flight_.empty()) result_.stopped_by = "no untried candidates left";
      return std::nullopt;
    }
    c.run = ++issued_;
    c.started_ms = store::now_ms();
    if (journal_ != nullptr && c.journal_file.empty()) {
      if (auto s = journal_->add(c.run, {c.seed, c.seed_sha256, c.generation, c.mutations}, c.bytes); !s) {
        error_ = s;
        return std::nullopt;
      }
    }
    const std::uint64_t ref = c.run;
    Task task{"fuzz:" + std::to_string(ref), c.bytes, ref};
    in_flight_.emplace(ref, std::move(c));
    return task;
  }

  void on_outcome(const Task& task, const Outcome& outcome) override {
    auto it = in_flight_.find(task.ref);
    if (it == in_flight_.end()) return;
    Candidate c = std::move(it->second);
    in_flight_.erase(it);
    ++result_.runs;
    ++result_.by_kind[std::string(to_string(outcome.kind))];

    // A child that failed before it asked for its payload (a plugin's init
    // crashing in the child, say) tells nothing about the input: a setup
    // failure, never a finding.
    if (outcome.kind == Kind::kSandboxError || outcome.before_payload) {
      if (++sandbox_errors_in_a_row_ >= kMaxSandboxErrorsInARow && error_.is_ok()) {
        error_ = Status::error("the last " + std::to_string(kMaxSandboxErrorsInARow) +
                               " runs could not start in the sandbox: " + outcome.message);
      }
    } else {
      sandbox_errors_in_a_row_ = 0;
      const bool news = corpus_.observe(behaviour_features(outcome));
      // Inputs that fail are not mutated further: their mutations would mostly
      // fail the same way (or each cost a whole limit again). Seeds are the
      // exception, so that --from-quarantine finds variants.
      if (news && !is_fuzz_finding(outcome.kind) && c.generation > 0) {
        corpus_.add({c.bytes, c.seed, c.seed_sha256, c.generation, c.mutations}, mutator_.rng());
      }
      if (is_fuzz_finding(outcome.kind)) note_failure(c, outcome);
    }
    settle_journal(c);
    if (Clock::now() - last_flush_ >= kRepeatFlushInterval) flush_repeats(false);
    if (settings_.on_progress) {
      std::uint64_t repeats = 0;
      for (const auto& [fp, n] : result_.repeats) repeats += n;
      for (const auto& [fp, n] : unflushed_) repeats += n;
      settings_.on_progress({result_.runs, corpus_.size(), result_.findings.size(), repeats, &result_.by_kind});
    }
  }

  // Writes the repeats counted since the last write: the counts only, and
  // at the end of the session one audit entry per fingerprint (not one
  // every few seconds, which would bury the record's history).
  void flush_repeats(bool end_of_session) {
    last_flush_ = Clock::now();
    for (auto it = unflushed_.begin(); it != unflushed_.end();) {
      auto counted = recorder_.add_repeats(it->first, static_cast<std::int64_t>(it->second), "");
      if (!counted) {
        if (error_.is_ok()) error_ = Status::error(counted.error());
        return;
      }
      if (*counted == 0) {
        // Its record was resolved or purged meanwhile: the next sighting
        // is recorded anew; these were counted on nothing.
        known_.erase(it->first);
      } else {
        result_.repeats[it->first] += it->second;
      }
      it = unflushed_.erase(it);
    }
    if (!end_of_session) return;
    for (const auto& [fp, n] : result_.repeats) {
      auto record = known_.find(fp);
      if (record == known_.end() || record->second == 0) continue;
      const std::string detail = "pillbox fuzz (--seed " + std::to_string(settings_.rng_seed) + "): " +
                                 std::to_string(n) + (n == 1 ? " mutated payload" : " mutated payloads") +
                                 " failed this way";
      if (auto s = recorder_.audit(record->second, "repeat", detail); !s && error_.is_ok()) error_ = s;
    }
  }

  const Status& error() const { return error_; }
  std::size_t corpus_size() const { return corpus_.size(); }
  std::size_t features() const { return corpus_.features(); }

 private:
  bool make_candidate(Candidate& c) {
    // A few tries to make something not run before; small inputs often
    // mutate back into each other.
    for (int attempt = 0; attempt < 64; ++attempt) {
      const CorpusEntry& parent = corpus_.pick(mutator_.rng());
      const CorpusEntry& other = corpus_.pick(mutator_.rng());
      std::string how;
      std::string bytes = mutator_.mutate(parent.bytes, &other == &parent ? std::string_view() : other.bytes, &how);
      if (!remember(bytes)) {
        ++result_.duplicates_skipped;
        continue;
      }
      c = Candidate{std::move(bytes), parent.seed, parent.seed_sha256, parent.generation + 1,
                    extend_lineage(parent.lineage, how), 0, 0, "", ""};
      return true;
    }
    return false;
  }

  // False when these bytes ran already (or collide with bytes that did).
  bool remember(const std::string& bytes) {
    const std::size_t bit = std::hash<std::string_view>{}(bytes) % kTriedBits;
    std::uint64_t& word = tried_[bit / 64];
    const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
    if ((word & mask) != 0) return false;
    word |= mask;
    return true;
  }

  // A candidate has its outcome: out of the journal once judged (and
  // recorded if it failed). If the store could not be written, it stays,
  // for the next session to run again.
  void settle_journal(const Candidate& c) {
    if (!c.journal_file.empty()) alone_in_flight_ = false;
    if (journal_ == nullptr) return;
    if (error_.is_ok()) {
      if (!c.journal_file.empty()) {
        journal_->remove_file(c.journal_file);
      } else {
        journal_->remove(c.run);
      }
    } else if (!c.journal_file.empty()) {
      journal_->unmark_running_alone(c.journal_file);
    } else {
      journal_->keep(c.run);
    }
  }

  // The next seed not already settled here (recovered, or recorded as
  // supervisor-lost: a seed that takes pillbox down must not run again).
  bool next_seed(Candidate& c) {
    while (seed_index_ < pending_seeds_.size()) {
      const Candidate& seed = pending_seeds_[seed_index_++];
      if (settled_.count(seed.seed_sha256) > 0) continue;
      c = seed;
      return true;
    }
    return false;
  }

  // `by_fingerprint`: a failure whose fingerprint is on file is a repeat
  // (what fuzzing finds). Otherwise the payload is recorded under its own
  // key whatever its fingerprint (a candidate that took pillbox down).
  void note_failure(const Candidate& c, const Outcome& o, bool by_fingerprint = true) {
    const std::string fp = o.fingerprint.empty() ? std::string(to_string(o.kind)) : o.fingerprint;
    if (by_fingerprint && known_.count(fp) > 0) {
      ++unflushed_[fp];
      return;
    }
    if (by_fingerprint && result_.findings.size() >= settings_.max_new_records) {
      // A target whose every failure gets a new fingerprint (garbage crash
      // frames, a JIT) would fill the store: stop and say so.
      if (result_.stopped_by.empty()) {
        result_.stopped_by = std::to_string(settings_.max_new_records) +
                             " new records in one session (--max-new-records): are the fingerprints stable?";
      }
      return;
    }
    // First sighting in this session: a fingerprint with an open record (a
    // run's, an earlier or a concurrent session's) is a repeat; the recorder
    // decides that in the transaction that would otherwise insert it.
    nlohmann::json origin = {{"seed", c.seed},
                             {"seed_sha256", c.seed_sha256},
                             {"generation", c.generation},
                             {"mutations", c.generation == 0 ? "none" : c.mutations},
                             {"rng_seed", settings_.rng_seed},
                             {"run", c.run}};
    if (!c.recovered_from.empty()) origin["recovered_from"] = "pillbox fuzz session " + c.recovered_from;
    Finding f;
    const std::string sha = sha256_hex(c.bytes);
    // The fingerprint is part of the key: the same bytes failing another way
    // (cpu-limit one time, wall-timeout the next) are another finding.
    f.key = "fuzz:" + sha.substr(0, 16) + "/" + fp;
    f.payload = c.bytes;
    f.outcome = o;
    f.origin = origin.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    f.started_ms = c.started_ms;
    f.ended_ms = store::now_ms();
    f.solo = settings_.jobs <= 1;
    f.repeat_if_fingerprint_open = by_fingerprint;
    auto recorded = recorder_.record(f, "found by pillbox fuzz from " + c.seed + " (generation " +
                                            std::to_string(c.generation) + ", run " + std::to_string(c.run) + ")");
    if (!recorded) {
      if (error_.is_ok()) error_ = Status::error(recorded.error());
      return;
    }
    if (recorded->repeat_of != 0) {
      known_[fp] = recorded->repeat_of;
      ++result_.repeats[fp];
      return;
    }
    if (recorded->already) {
      // Recorded meanwhile (another session on this store): a repeat.
      if (recorded->record_id != 0) known_[fp] = recorded->record_id;
      ++result_.repeats[fp];
      return;
    }
    known_[fp] = recorded->record_id;
    FuzzFinding finding{recorded->record_id, std::string(to_string(o.kind)), fp, o.message, c.bytes.size(),
                        c.seed, c.generation == 0 ? "none" : c.mutations, c.run, recorded->folded};
    if (recorded->folded) {
      ++result_.repeats[fp];
    } else {
      result_.findings.push_back(finding);
      if (settings_.stop_on_finding && result_.stopped_by.empty()) result_.stopped_by = "--stop-on-finding";
    }
    if (settings_.on_finding) settings_.on_finding(finding);
  }

  static Candidate recovered_candidate(const RecoveredCandidate& r) {
    return Candidate{r.bytes, r.origin.seed, r.origin.seed_sha256, r.origin.generation, r.origin.mutations, 0, 0, "",
                     r.from_session};
  }

  FindingRecorder& recorder_;
  const FuzzSettings& settings_;
  FuzzResult& result_;
  InFlightJournal* journal_;                      // null: no journal
  std::vector<RecoveredCandidate> recovered_;     // run first, one at a time
  std::size_t recovered_index_ = 0;
  bool alone_in_flight_ = false;
  std::set<std::string> settled_;                 // SHA-256 of recovered and lost candidates
  Mutator mutator_;
  FuzzCorpus corpus_;
  std::vector<Candidate> pending_seeds_;
  std::size_t seed_index_ = 0;
  std::uint64_t issued_ = 0;
  std::unordered_map<std::uint64_t, Candidate> in_flight_;
  std::vector<std::uint64_t> tried_ = std::vector<std::uint64_t>(kTriedBits / 64);
  std::map<std::string, std::int64_t> known_;        // fingerprint -> the record its repeats go to
  std::map<std::string, std::uint64_t> unflushed_;   // repeats not yet written
  int sandbox_errors_in_a_row_ = 0;
  Clock::time_point started_;
  Clock::time_point last_flush_;
  Status error_;
};

}  // namespace

bool is_fuzz_finding(Kind kind) {
  switch (kind) {
    case Kind::kCrash:
    case Kind::kStackOverflow:
    case Kind::kCpuLimit:
    case Kind::kWallTimeout:
    case Kind::kOom:
    case Kind::kSeccompViolation:
    case Kind::kOutputLimit:
    case Kind::kProtocolError:
      return true;
    case Kind::kOk:
    case Kind::kHandlerError:
    case Kind::kKilled:  // a signal from outside (the host's OOM killer, an operator): not the payload
    case Kind::kSandboxError:
    case Kind::kSupervisorLost:
      return false;
  }
  return false;
}

Expected<FuzzResult> run_fuzz(FindingRecorder& recorder, const FuzzSettings& settings) {
  FuzzResult result;
  const auto started = Clock::now();
  std::optional<InFlightJournal> journal;
  std::vector<RecoveredCandidate> recovered;
  if (!settings.journal_root.empty()) {
    const RunIdentity& id = recorder.identity();
    auto opened = InFlightJournal::open(settings.journal_root, id.handler_identity + "\n" + id.policy_identity + "\n");
    if (!opened) return Error{opened.error()};
    journal.emplace(std::move(*opened));
    std::size_t other_identity = 0;
    auto found = journal->recover(other_identity);
    if (!found) return Error{found.error()};
    recovered = std::move(*found);
    if (settings.on_recovered && (!recovered.empty() || other_identity > 0)) {
      settings.on_recovered(recovered.size(), other_identity);
    }
  }
  FuzzPlanner planner(recorder, settings, result, journal ? &*journal : nullptr, std::move(recovered));
  planner.record_lost_candidates();
  if (!planner.error().is_ok()) return Error{planner.error().message()};
  const RunSettings run = planned_run_settings(settings.config, settings.mode, settings.jobs, settings.sandbox_binary);
  auto report = run_planned(run, planner);
  planner.flush_repeats(true);
  result.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  result.corpus = planner.corpus_size();
  result.features = planner.features();
  if (!report) return Error{report.error()};
  if (!planner.error().is_ok()) return Error{planner.error().message()};
  if (report->stop_signal != 0) {
    result.stop_signal = report->stop_signal;
    result.stopped_by = stop_signal_name(report->stop_signal);
  }
  return result;
}

}  // namespace pillbox::fuzz
