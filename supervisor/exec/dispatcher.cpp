// The dispatcher: one single-threaded event loop that keeps `jobs` children
// busy, watches their wires and their launcher, enforces wall deadlines and
// turns every task into exactly one Outcome. Nothing a child does can block
// it: every read is non-blocking and bounded, every wait has a deadline.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <zmq.hpp>

#include "shared/task_input.h"
#include "supervisor/exec/access_check.h"
#include "supervisor/exec/cgroups.h"
#include "supervisor/classify/classifier.h"
#include "supervisor/exec/guardian.h"
#include "supervisor/exec/handler_version.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/runtime_dir.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/exec/crash_library_copy.h"
#include "supervisor/exec/wire_socket.h"
#include "supervisor/exec/task_channel.h"
#include "supervisor/exec/uid_pool.h"

namespace pillbox {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxLauncherRestarts = 5;
// After a child exited, how long its last frames may take to surface from
// the socket (they are already in the kernel; this bounds a stuck reader).
constexpr auto kDrainGrace = std::chrono::seconds(2);

// The largest frame a child may send: its output and the frame around it.
std::size_t max_frame(const RunSettings& settings) { return settings.config.policy.limits.output_bytes + kFrameOverhead; }

struct Running {
  Task task;
  std::uint64_t seq = 0;
  Secret secret{};
  std::size_t slot = 0;
  std::unique_ptr<WireSocket> wire;      // before channel: the channel uses it
  std::unique_ptr<TaskChannel> channel;
  pid_t pid = 0;
  Clock::time_point started;
  Clock::time_point deadline;
  std::uint64_t oom_kills_before = 0;
  std::optional<Clock::time_point> drain_deadline;  // exited; waiting for its last frames
  bool stopped = false;  // the source took it back (TaskSource::take_stopped): killed
  Execution exec;
};

class Dispatcher {
 public:
  Dispatcher(const RunSettings& settings, TaskSource& source, OutcomeSink& sink, RuntimeDir rundir)
      : settings_(settings),
        source_(source),
        sink_(sink),
        rundir_(std::move(rundir)),
        ctx_(1),
        wires_(ctx_, rundir_.path(), max_frame(settings), settings.jobs + 2) {
    launcher_settings_.mode = settings.mode;
    launcher_settings_.sandbox_binary = sandbox_binary_or_found(settings.sandbox_binary);
    launcher_settings_.config = settings.config;
    identity_ = settings.identity.empty() ? handler_identity(settings.config) : settings.identity;
    ctx_.set(zmq::ctxopt::max_sockets, 4096);
  }

  Status setup() {
    // find_sandbox_binary() found none (a binary copied away from its helpers).
    if (launcher_settings_.sandbox_binary.empty()) return Status::error(missing_helper_message(locate_sandbox_binary()));
    const Policy& policy = settings_.config.policy;
    if (policy.isolation.cgroup != CgroupMode::kOff) {
      const CgroupProbe probe = probe_cgroups();
      auto slots = CgroupSlots::create(probe, settings_.jobs, policy.limits);
      if (slots) {
        cgroups_ = std::move(*slots);
        report_.cgroups = cgroups_->detail();
      } else if (policy.isolation.cgroup == CgroupMode::kRequired) {
        return Status::error("the policy requires a cgroup but none can be used: " + slots.error());
      } else {
        report_.cgroups = "none: " + slots.error();
        report_.warnings.push_back("no per-task cgroup (" + slots.error() +
                                   "): memory is limited by RLIMIT_AS only, fork bombs by RLIMIT_NPROC only");
      }
    } else {
      report_.cgroups = "off (policy)";
    }
    const ChildConfig& config = settings_.config;
    if (config.drop_privileges && policy.isolation.uid_pool_size > 0) {
      auto claims = UidClaims::claim(policy.isolation.uid_pool_first, policy.isolation.uid_pool_size, settings_.jobs);
      if (!claims) return Status::error(claims.error());
      uids_ = std::move(*claims);
      // The plugin check before the run loads the plugin as a uid of this
      // run's own, not as the pool's first (which may be another run's slot).
      launcher_settings_.config.check_uid = uids_->uid(0);
    }
    // Can a slot's uid run the command at all (all slot uids are alike)?
    // Otherwise every task would fail the same way and be charged for it.
    const std::uint32_t task_uid = uids_ ? uids_->uid(0) : config.sandbox_uid;
    const std::uint32_t task_gid = uids_ ? uids_->uid(0) : config.sandbox_gid;
    // Possibly a copy that uid can preload (crash_library_copy.h).
    auto crash_lib = crash_library_for_tasks(config, task_uid, task_gid);
    if (!crash_lib) return Status::error(crash_lib.error());
    launcher_settings_.config.crash_lib = *crash_lib;
    auto& kept = launcher_settings_.config.keep_visible;
    if (!private_dir_of(*crash_lib).empty() && std::find(kept.begin(), kept.end(), *crash_lib) == kept.end()) {
      kept.push_back(*crash_lib);  // a copy in /tmp (no home to keep it in): shown to tasks there
    }
    if (auto s = check_host_view(config); !s) return s;
    if (auto s = check_command_access(config, task_uid, task_gid); !s) return s;
    if (!config.drop_privileges) {
      report_.warnings.push_back("not running as root: tasks run as your own uid, so they can signal each other and "
                                 "your other processes (in spawn mode pillbox itself); run as root for hostile input");
    }
    for (std::size_t i = settings_.jobs; i-- > 0;) free_slots_.push_back(i);
    if (auto s = start_guardian(); !s) return s;
    return start_launcher();
  }

  Expected<RunReport> run() {
    bool source_done = false;
    while (true) {
      if (auto s = source_.prepare(source_done ? 0 : free_slots_.size()); !s) return Error{s.message()};
      bool source_waiting = false;
      std::optional<Clock::time_point> source_wake_at;
      while (!source_done && !free_slots_.empty()) {
        TaskSource::Item item = source_.next();
        if (item.type == TaskSource::Item::Type::kEnd) {
          source_done = true;
        } else if (item.type == TaskSource::Item::Type::kWait) {
          source_waiting = true;
          source_wake_at = item.wake_at;
          break;
        } else if (item.type == TaskSource::Item::Type::kError) {
          ++report_.input_errors;
          sink_.on_input_error(item.error);
        } else {
          launch(std::move(item.task));
        }
      }
      // The source's transaction (the ledger's count of this turn's
      // attempts) commits while the children fork: none of them reads its
      // payload before the next poll. Tasks that could not be launched are
      // told only then: their outcome is about an attempt that is counted.
      if (auto s = source_.commit_turn(); !s) return Error{s.message()};
      for (auto& r : std::exchange(not_launched_, {})) finish(std::move(r));
      for (std::uint64_t ref : source_.take_stopped()) stop_task(ref);
      if (source_done && running_.empty()) break;

      // Wait for anything: launcher, wires, stdin, or the nearest deadline.
      std::vector<zmq::pollitem_t> items;
      const std::vector<int> launcher_fds = launcher_->watch_fds();
      for (int fd : launcher_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
      const std::vector<int> source_fds = source_waiting ? source_.wait_fds() : std::vector<int>{};
      for (int fd : source_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
      std::vector<Running*> order;
      for (auto& [seq, r] : running_) {
        if (r->channel) {
          r->channel->add_poll_items(items);
          order.push_back(r.get());
        }
      }
      const std::size_t idle_base = items.size();
      const std::size_t idle_wires = wires_.add_poll_items(items);
      auto timeout = launcher_->needs_tick() ? std::min(next_timeout(), std::chrono::milliseconds(20)) : next_timeout();
      if (source_wake_at) timeout = std::min(timeout, until(*source_wake_at));
      try {
        zmq::poll(items, timeout);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        continue;  // a signal: nothing became ready; look again
      }

      // Wires first, so a RESULT that arrived before its EXITED is seen first.
      const std::size_t base = launcher_fds.size() + source_fds.size();
      for (std::size_t i = 0; i < order.size(); ++i) {
        const auto& sock = items[base + 2 * i];
        const auto& mon = items[base + 2 * i + 1];
        if ((sock.revents | mon.revents) & ZMQ_POLLIN) on_wire(*order[i]);
      }
      for (std::size_t i = 0; i < idle_wires; ++i) {
        if (items[idle_base + i].revents & ZMQ_POLLIN) {
          wires_.tend();
          break;
        }
      }
      if (auto lost = on_launcher_events(); !lost) return Error{lost.message(), lost.code()};
      enforce_deadlines();
    }
    report_.launcher = launcher_->describe();
    return report_;
  }

 private:
  // Before the launcher: the guardian must not hold anything of it open.
  Status start_guardian() {
    GuardianTargets targets;
    if (uids_) {
      for (std::size_t slot = 0; slot < uids_->size(); ++slot) targets.uids.push_back(uids_->uid(slot));
      targets.keep_fds = uids_->lock_fds();
    }
    if (cgroups_) {
      for (std::size_t slot = 0; slot < settings_.jobs; ++slot) {
        for (auto& f : cgroups_->procs_files(slot)) targets.cgroup_procs.push_back(std::move(f));
      }
    }
    if (targets.empty()) {
      report_.warnings.push_back(
          "neither a uid pool (root) nor a cgroup: a process a task starts outside its process group (setsid) "
          "can outlive the task and the run" +
          std::string(settings_.mode == LaunchMode::kSpawn ? " (spawn mode has no PID namespace)"
                                                           : " where the zygote has no PID namespace"));
      return Status::ok();
    }
    auto guardian = Guardian::start(targets);
    if (!guardian) return Status::error(guardian.error());
    guardian_ = std::move(*guardian);
    return Status::ok();
  }

  Status start_launcher() {
    launcher_ = make_launcher(launcher_settings_);
    if (auto s = launcher_->start(); !s) return s;
    report_.isolation = launcher_->isolation();
    for (const auto& w : launcher_->warnings()) {
      if (std::find(report_.warnings.begin(), report_.warnings.end(), w) == report_.warnings.end()) {
        report_.warnings.push_back(w);
      }
    }
    // The payload's file under its own name lives in the private /tmp
    // (shared/task_input.h); without one, {} is the memory file on fd 3.
    // A zygote says which namespaces it has; in spawn mode, each child makes
    // its own, and the check before the run warned of a refused one.
    const bool read_only_view = settings_.mode == LaunchMode::kSpawn ||
                                std::find(report_.isolation.begin(), report_.isolation.end(), "mount(read-only)") !=
                                    report_.isolation.end();
    if (settings_.config.exec_payload_as_file && (!has_private_tmp(settings_.config.policy) || !read_only_view)) {
      const Isolation& iso = settings_.config.policy.isolation;
      const std::string why = iso.tmp_bytes == 0                          ? "the policy has `tmp = none`"
                              : iso.filesystem != FilesystemMode::kReadOnly ? "the policy's `filesystem` is not read-only"
                                                                            : "the host refused a read-only view";
      report_.warnings.push_back(
          "tasks get no private /tmp here (" + why +
          "), so {} is " + std::string(kPayloadFdPath) +
          ": a file without the input's name or extension; {/}, {/.} and $PILLBOX_KEY still give them");
    }
    return Status::ok();
  }

  void launch(Task task) {
    auto r = std::make_unique<Running>();
    r->task = std::move(task);
    r->seq = ++next_seq_;
    r->secret = random_secret();
    r->slot = free_slots_.back();
    free_slots_.pop_back();
    r->exec.exec_mode = settings_.config.exec_mode();
    r->exec.limits = settings_.config.policy.limits;
    r->exec.handler_identity = identity_;
    r->started = Clock::now();
    r->deadline = r->started + std::chrono::milliseconds(settings_.config.policy.limits.wall_ms);
    // A task that cannot be launched is finished after the turn's commit (not_launched_).
    const auto not_launched = [&](std::string why) {
      r->exec.launch_error = std::move(why);
      not_launched_.push_back(std::move(r));
    };
    TaskTicket ticket;
    ticket.seq = r->seq;
    ticket.secret = r->secret;
    ticket.slot = static_cast<std::uint32_t>(r->slot);
    ticket.uid = uids_ ? uids_->uid(r->slot) : settings_.config.sandbox_uid;
    ticket.gid = uids_ ? uids_->uid(r->slot) : settings_.config.sandbox_gid;
    if (r->exec.exec_mode) {
      // Where tasks come in, a longer key is refused (shared/task_input.h);
      // one that got past (a record from an older store) is not the
      // payload's fault.
      if (r->task.key.size() > kMaxTaskKeyBytes) {
        return not_launched("the task's key is " + std::to_string(r->task.key.size()) + " bytes, over the " +
                            std::to_string(kMaxTaskKeyBytes) + "-byte limit of a key an exec command is given");
      }
      ticket.key = r->task.key;
      r->exec.task_key = r->task.key;
      r->exec.payload_size = r->task.payload.size();
    }
    try {
      r->wire = wires_.acquire();
      r->channel = std::make_unique<TaskChannel>(*r->wire, r->seq, r->secret, r->task.payload, max_frame(settings_),
                                                 r->exec.exec_mode);
      ticket.endpoint = r->channel->endpoint();
    } catch (const zmq::error_t& e) {
      return not_launched(std::string("cannot open the task's wire: ") + e.what());
    }
    if (cgroups_) {
      ticket.cgroup_procs = cgroups_->procs_files(r->slot);
      r->oom_kills_before = cgroups_->oom_kills(r->slot);
    }
    if (auto s = launcher_->launch(ticket); !s) return not_launched("launch failed: " + s.message());
    running_[r->seq] = std::move(r);
  }

  void on_wire(Running& r) {
    r.channel->on_readable();
    if (r.exec.exit) {
      if (ready_to_finish(r)) finish_seq(r.seq);
      return;
    }
    if (!r.channel->violation().empty() && !r.exec.killed_for_protocol) {
      r.exec.killed_for_protocol = true;
      kill_task(r);
    }
  }

  // An exited child is finished when nothing more can come over its wire.
  // A child that died of a signal is judged by the signal; an exec program
  // answers by exiting; an in-process child's RESULT may still be on its way
  // up from the socket until the disconnect shows everything was read.
  static bool ready_to_finish(const Running& r) {
    if (r.exec.exec_mode || WIFSIGNALED(r.exec.exit->wait_status)) return true;
    return r.channel->finished();
  }

  // Returns an error only when the launcher cannot be restarted.
  Status on_launcher_events() {
    for (LaunchEvent& ev : launcher_->collect()) {
      if (ev.type == LaunchEvent::Type::kLauncherLost) {
        for (auto& [seq, r] : running_) {
          if (!r->exec.exit) r->exec.launch_error = "the sandbox launcher died: " + ev.message;
        }
        while (!running_.empty()) finish_seq(running_.begin()->first);
        if (++launcher_restarts_ > kMaxLauncherRestarts) {
          return Status::error("the sandbox launcher died " + std::to_string(launcher_restarts_) +
                               " times; last: " + ev.message);
        }
        report_.warnings.push_back("restarted the sandbox launcher after: " + ev.message);
        return start_launcher();
      }
      auto it = running_.find(ev.seq);
      if (it == running_.end()) continue;
      Running& r = *it->second;
      switch (ev.type) {
        case LaunchEvent::Type::kForked:
          r.pid = ev.pid;
          if (r.exec.killed_for_timeout || r.exec.killed_for_protocol || r.stopped) kill_task(r);
          break;
        case LaunchEvent::Type::kForkFailed:
          r.exec.launch_error = "cannot start the child: " + ev.message;
          finish_seq(r.seq);
          break;
        case LaunchEvent::Type::kExited:
          r.pid = ev.pid;
          r.exec.exit = std::move(ev.exit);
          r.channel->on_readable();  // anything the child sent before it died
          if (ready_to_finish(r)) {
            finish_seq(r.seq);
          } else {
            r.drain_deadline = Clock::now() + kDrainGrace;
          }
          break;
        case LaunchEvent::Type::kLauncherLost:
          break;
      }
    }
    return Status::ok();
  }

  void enforce_deadlines() {
    const auto now = Clock::now();
    std::vector<std::uint64_t> drained;
    for (auto& [seq, r] : running_) {
      if (r->drain_deadline) {
        if (now >= *r->drain_deadline) drained.push_back(seq);
      } else if (!r->exec.killed_for_timeout && now >= r->deadline) {
        r->exec.killed_for_timeout = true;
        kill_task(*r);
      }
    }
    for (auto seq : drained) finish_seq(seq);
  }

  // From now to `when`, rounded up to whole milliseconds (poll's unit: a
  // wait rounded down would wake just before `when`, and spin), 0 when past.
  static std::chrono::milliseconds until(Clock::time_point when) {
    const auto left = when - Clock::now();
    if (left <= Clock::duration::zero()) return std::chrono::milliseconds(0);
    return std::chrono::ceil<std::chrono::milliseconds>(left);
  }

  std::chrono::milliseconds next_timeout() const {
    auto nearest = Clock::time_point::max();
    for (const auto& [seq, r] : running_) {
      if (r->drain_deadline) nearest = std::min(nearest, *r->drain_deadline);
      else if (!r->exec.killed_for_timeout) nearest = std::min(nearest, r->deadline);
    }
    if (nearest == Clock::time_point::max()) return std::chrono::milliseconds(1000);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(nearest - Clock::now());
    return std::clamp(wait + std::chrono::milliseconds(1), std::chrono::milliseconds(0), std::chrono::milliseconds(1000));
  }

  // SIGKILL to the child's process group (its descendants), through the
  // launcher: a zygote's children have pids only it can name.
  void kill_task(Running& r) {
    if (r.pid > 0) launcher_->kill(r.pid);
  }

  // A task the source took back while it ran: killed now (or as soon as
  // its fork is known); its outcome goes to the sink as any.
  void stop_task(std::uint64_t ref) {
    for (auto& [seq, r] : running_) {
      if (r->task.ref != ref || r->stopped || r->exec.exit) continue;
      r->stopped = true;
      kill_task(*r);
    }
  }

  void finish_seq(std::uint64_t seq) {
    auto it = running_.find(seq);
    if (it == running_.end()) return;
    finish(std::move(running_.extract(it).mapped()));
  }

  void finish(std::unique_ptr<Running> r) {
    Execution& ex = r->exec;
    ex.wall_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - r->started).count());
    if (r->channel) {
      ex.result = r->channel->result();
      ex.setup_failure = r->channel->setup_failure();
      ex.protocol_violation = r->channel->violation();
      ex.payload_delivered = r->channel->payload_delivered();
      r->channel.reset();
    }
    wires_.release(std::move(r->wire));
    if (cgroups_) {
      ex.cgroup_oom = cgroups_->oom_kills(r->slot) > r->oom_kills_before;
      cgroups_->kill_all(r->slot);  // stragglers that left the process group
      cgroups_->renew_if_charged(r->slot);  // tmpfs files it left must not shrink the next task's memory
    } else if (uids_) {
      // Without a cgroup, the slot's uid is what names a straggler (a
      // setsid'd daemon). The next child of the slot kills its uid's
      // processes too, but from that uid: a straggler that SIGSTOPs its uid
      // without pause can stop that child first, which then never asks for
      // its payload. From root, here, nothing can stop the sweep.
      kill_processes_of_uid(uids_->uid(r->slot));
    }
    const Outcome outcome = classify(ex, symbolizer_);
    ++report_.tasks;
    ++report_.by_kind[outcome.kind];
    free_slots_.push_back(r->slot);
    sink_.on_outcome(r->task, outcome);
  }

  const RunSettings& settings_;
  TaskSource& source_;
  OutcomeSink& sink_;
  RuntimeDir rundir_;
  zmq::context_t ctx_;
  // Sockets kept from task to task while nothing of an earlier task can
  // reach them (wire_socket.h). Declared before running_, whose tasks hold some.
  WirePool wires_;
  LauncherSettings launcher_settings_;
  // Declared before the launcher, the cgroups and the uids, so it ends only
  // after they cleaned up (and keeps the uids claimed until its last sweep).
  std::unique_ptr<Guardian> guardian_;
  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<CgroupSlots> cgroups_;
  std::unique_ptr<UidClaims> uids_;  // one uid per slot (policy uid_pool, as root)
  Symbolizer symbolizer_;
  std::string identity_;
  std::map<std::uint64_t, std::unique_ptr<Running>> running_;
  // Tasks of this turn that could not be launched: finished after the
  // turn's commit_turn (their slots stay taken until then).
  std::vector<std::unique_ptr<Running>> not_launched_;
  std::vector<std::size_t> free_slots_;
  std::uint64_t next_seq_ = 0;
  int launcher_restarts_ = 0;
  RunReport report_;
};

}  // namespace

std::string handler_identity(const ChildConfig& config) {
  std::string id = config.handler;
  if (config.exec_mode()) {
    // What runs, not where it was started: the program's base name, and
    // host paths as host_path_identity gives them, so the same script named
    // from different directories is one identity (one fingerprint per bug,
    // one ledger to resume). What scripts hold is their version instead.
    for (std::size_t i = 0; i < config.exec_argv.size(); ++i) {
      const std::string& a = config.exec_argv[i];
      std::error_code ec;
      if (i == 0) {
        id += " " + a.substr(a.rfind('/') + 1);
      } else if (a.starts_with("/") && std::filesystem::exists(a, ec)) {
        id += " " + host_path_identity(a);
      } else {
        id += " " + a;
      }
    }
    return id;
  }
  for (const auto& [k, v] : config.args) id += " " + k + "=" + v;
  return id;
}

Expected<RunReport> run_tasks(const RunSettings& settings, TaskSource& source, OutcomeSink& sink) {
  // A zygote that dies mid-write must not take the supervisor with it.
  ::signal(SIGPIPE, SIG_IGN);
  if (settings.jobs == 0) return Error{"--jobs must be at least 1"};
  auto rundir = RuntimeDir::create();
  if (!rundir) return Error{rundir.error()};
  Dispatcher d(settings, source, sink, std::move(*rundir));
  if (auto s = d.setup(); !s) return Error{s.message(), s.code()};
  return d.run();
}

}  // namespace pillbox
