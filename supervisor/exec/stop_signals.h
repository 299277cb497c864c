#pragma once
// SIGINT/SIGTERM while a long operation runs (run, reproduce, minimize,
// replay): the handler only records the signal; the dispatcher's poll
// returns EINTR, its loop comes round, and the operation stops at the next
// turn and records what it did. While a StopSignals lives, the signals do
// not kill pillbox; the previous handlers come back when it goes. One made
// while another lives (nested) keeps what the outer one caught: a signal
// between two inner ones is not lost. One thread only (the CLI's).
#include <signal.h>

namespace pillbox {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // SIGINT or SIGTERM if one arrived since construction (of the outermost
  // one living), else 0.
  int caught() const;

 private:
  struct sigaction old_sigint_ {};
  struct sigaction old_sigterm_ {};
};

// "SIGINT" / "SIGTERM".
const char* stop_signal_name(int sig);

}  // namespace pillbox
