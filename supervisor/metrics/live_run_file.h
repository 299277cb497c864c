#pragma once
// A `run` with a store publishes its live numbers for `pillbox serve`'s
// /runs in S/live/RUN_ID.json (mode 0600), rewritten once a second by a
// thread of its own (temp file + rename: readers see whole files; tasks pay
// nothing). The file names the run's process claim
// (supervisor/store/process_claim.h), so a reader tells a SIGKILLed run,
// whose file stays, from a live one. Best effort: a failed write never
// stops the run.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "supervisor/metrics/run_metrics.h"

namespace pillbox::metrics {

// S/live: the directory of the live files.
std::string live_dir(const std::string& store_dir);

// The window over which tasks_per_second is measured.
inline constexpr std::chrono::seconds kRateWindow{10};

class LiveRunFile {
 public:
  // Writes the file before it returns and then every `interval` until destroyed.
  // `metrics` outlives this.
  LiveRunFile(std::string store_dir, std::int64_t run_id, const RunMetrics& metrics,
              std::chrono::milliseconds interval = std::chrono::seconds(1));
  // Stops the thread and removes the file: the run has ended.
  ~LiveRunFile();
  LiveRunFile(const LiveRunFile&) = delete;
  LiveRunFile& operator=(const LiveRunFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
  std::int64_t run_id_;
  const RunMetrics& metrics_;
  std::chrono::milliseconds interval_;
  std::string started_at_;
  // (when, tasks with a verdict so far), oldest first, kRateWindow of them.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> samples_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // started by the constructor once the first write is done

  void loop();
  void write_once();
};

// The object a live file holds, from one snapshot (split out for tests).
nlohmann::json live_run_json(std::int64_t run_id, const RunMetrics::Counters& counters, const std::string& started_at,
                             double tasks_per_second);

// Limits per read_live_runs call: the directory is the store's, but a
// reader bounds what it trusts.
inline constexpr std::size_t kMaxLiveFiles = 256;
inline constexpr std::size_t kMaxLiveFileBytes = 64 * 1024;

// The live files of S whose run is alive, by run id, each with "holder":
// "live" (this host, this boot) or "other host" (cannot be told from here).
// Files of gone processes are skipped and, with `remove_gone`, deleted;
// files that are not a regular RUN_ID.json, too large, or not a JSON object
// naming a claim are skipped. No S/live: no live runs.
nlohmann::json read_live_runs(const std::string& store_dir, bool remove_gone);

}  // namespace pillbox::metrics
