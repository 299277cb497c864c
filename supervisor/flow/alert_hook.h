#pragma once
// `pillbox run --on-quarantine CMD`: runs an operator's command once per new
// quarantine record, the record's JSON on the command's stdin.
//
// A hook is someone else's program and may fail, hang, flood or never read
// its input; none of that may slow or stop a run. So the run's single-threaded
// loop only ever queues a record (fire() never waits on anything but a short
// mutex), and one background thread runs the hooks one at a time, each with a
// deadline. A full queue drops records rather than growing without bound or
// blocking the run; what was lost is counted and reported.
//
// Hooks are claimed children (spawn_claimed_child), so spawn mode's reaper
// leaves them alone; a hook reaped elsewhere all the same is reported as a
// problem ("exit status lost"), not as a success.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shared/unique_fd.h"

namespace pillbox {

struct HookSettings {
  std::string command;                       // run as `/bin/sh -c command`
  std::chrono::milliseconds timeout{10000};  // per hook; then its process group is killed
  std::size_t max_queued = 1000;             // records waiting beyond this are dropped
};

class AlertHook {
 public:
  // Starts the hook thread. The environment hooks get (the supervisor's,
  // plus PILLBOX_HOOK=1) is captured here.
  explicit AlertHook(HookSettings settings);
  // finish() with a short grace, unless it was called already.
  ~AlertHook();
  AlertHook(const AlertHook&) = delete;
  AlertHook& operator=(const AlertHook&) = delete;

  // Queues one record for the hook. Never waits for a hook. Dropped (and
  // counted) when max_queued records are already waiting or after finish().
  void fire(std::string json);

  // Lets the queued hooks run for at most `grace` in all; then the running
  // hook's process group is killed, what is still queued is dropped, and
  // the hook thread is joined. Calling it again does nothing.
  void finish(std::chrono::milliseconds grace);

  // fired() counts every fire() call. Once finish() returned:
  // fired() == succeeded() + failed() + dropped().
  std::size_t fired() const;
  std::size_t succeeded() const;  // exited with status 0
  std::size_t failed() const;     // ran, but did not exit with status 0 (or could not start)
  std::size_t dropped() const;    // never ran: queue full, or the run ended first

  // One line per failed hook, for the run to print as warnings; at most
  // kMaxProblemLines of them, then one line saying how many more there
  // were, then one line about dropped records if any.
  std::vector<std::string> problems() const;

  static constexpr std::size_t kMaxProblemLines = 20;

 private:
  void work();
  void run_one(const std::string& json);
  void note_failure(std::string line);  // mu_ held

  const HookSettings settings_;
  std::vector<std::string> env_;  // "NAME=value", with PILLBOX_HOOK=1
  UniqueFd wake_;                 // eventfd: finish() ran out of grace

  mutable std::mutex mu_;
  std::condition_variable cv_;  // work queued, stop requested, or worker done
  std::deque<std::string> queue_;
  bool stopping_ = false;  // finish() called: drain, then exit
  bool aborted_ = false;   // grace ran out: kill the running hook, run no more
  bool worker_done_ = false;
  bool finished_ = false;
  std::size_t fired_ = 0, succeeded_ = 0, failed_ = 0;
  std::size_t dropped_full_ = 0, dropped_at_end_ = 0;
  std::vector<std::string> problems_;
  std::size_t problems_omitted_ = 0;

  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace pillbox
