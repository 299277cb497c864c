#pragma once
// The calling thread's CPU time, for tests that bound how much work a
// hostile input costs: unlike the wall clock, it does not grow when the
// host is loaded (CI runs other tests and builds beside the unit tests), so
// such a bound fails for quadratic work and never for a busy machine.
#include <time.h>

namespace pillbox::test {

inline double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

}  // namespace pillbox::test
