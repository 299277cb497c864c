#pragma once
// SIGINT/SIGTERM while a long operation runs: the handler only records the
// signal, the dispatcher's poll returns EINTR, and the operation stops at
// its next turn. While a StopSignals lives the signals do not kill pillbox;
// the previous handlers come back when it goes. A nested one keeps what the
// outer one caught. One thread only (the CLI's).
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
