#include "supervisor/exec/sandbox_env.h"

#include <cstdlib>

#include "shared/fault_injection.h"
#include "supervisor/exec/launcher.h"

namespace pillbox {

boost::process::environment sandbox_environment(LaunchMode mode) {
  boost::process::environment env;
  env.clear();  // a default-constructed one is empty, but say so
  // set(), not operator[]: Boost 1.74's find() behind [] compares the key
  // with each entry past the end of a shorter one (ASan showed it in
  // supervisor/serve/console_jobs.cpp).
  auto pass = [&env](const char* name) {
    if (const char* v = std::getenv(name); v != nullptr) env.set(name, v);
  };
  pass("PILLBOX_PDF_TEXT_LIB");  // an install path (sandbox/handlers/pdf_text_loader.cpp)
  pass(kUnremovableForTestsEnv);  // a test's fault (shared/fault_injection.h)
#ifdef PILLBOX_SANITIZED
  pass("ASAN_OPTIONS");
  pass("UBSAN_OPTIONS");
  pass("LSAN_OPTIONS");
#endif
  // With lazy binding each child would look up symbols again and copy-on-write
  // the GOT pages, on every task; a spawned child runs one task only.
  if (mode == LaunchMode::kZygote) env.set("LD_BIND_NOW", "1");
  return env;
}

}  // namespace pillbox
