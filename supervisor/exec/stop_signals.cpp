#include "supervisor/exec/stop_signals.h"

#include <csignal>

namespace pillbox {
namespace {

volatile std::sig_atomic_t stop_signal_received = 0;
extern "C" void on_stop_signal(int sig) { stop_signal_received = sig; }
// StopSignals alive now (nesting: a replay's batch inside the replay).
int live_instances = 0;

}  // namespace

StopSignals::StopSignals() {
  if (live_instances++ == 0) stop_signal_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_sigint_);
  ::sigaction(SIGTERM, &sa, &old_sigterm_);
}

StopSignals::~StopSignals() {
  --live_instances;
  ::sigaction(SIGINT, &old_sigint_, nullptr);
  ::sigaction(SIGTERM, &old_sigterm_, nullptr);
}

int StopSignals::caught() const { return static_cast<int>(stop_signal_received); }

const char* stop_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace pillbox
