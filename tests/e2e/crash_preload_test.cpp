// What the crash library (libpillbox-crash.so, preloaded into every exec'd
// program) brings into a program besides itself: nothing. Its unwinder is
// its own hidden copy, so no exec loads libgcc_s.so.1 for it (the cost it
// was per exec), and a C++ program's exceptions never unwind with that copy.
// That its frames are still captured and symbolized is fingerprint_test's.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <string>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an exec'd program maps the crash library and no unwinder library besides") {
  e2e::TempDir dir;
  const std::string input = dir.write("any", "payload\n");
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_pillbox({"run", "--json", "--no-store", "--mode", mode, input, "--", "/bin/cat", "/proc/self/maps"});
    INFO(r.describe());
    REQUIRE(r.records.size() == 1);
    CHECK(r.records[0]["kind"] == "ok");
    const std::string maps = r.records[0].value("output", "");
    // pillbox's own, or the copy tasks preload when the build's path has a
    // space or their uid cannot read it (libpillbox-crash-<hex>.so).
    CHECK_MESSAGE(contains(maps, "libpillbox-crash"), maps);
#if defined(PILLBOX_SANITIZED)
    // The sanitized crash library brings the sanitizer runtimes, and they
    // bring libstdc++ and libgcc_s: what an ordinary build loads is not
    // what this build shows.
    MESSAGE("skipped (sanitized build): the check that no unwinder library is mapped");
#else
    CHECK_MESSAGE(!contains(maps, "libgcc_s"), maps);
#endif
  }
}

TEST_CASE("the crash library exports no unwinder symbol a program could bind to instead of its own") {
  // Preloaded libraries come first in symbol lookup: an exported
  // _Unwind_RaiseException would take over every C++ program's throws.
  // Without PILLBOX_CRASH_FD its constructor does nothing, here as anywhere.
  void* lib = ::dlopen(PILLBOX_BUILD_DIR "/libpillbox-crash.so", RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(lib != nullptr, ::dlerror());
  for (const char* name : {"_Unwind_Backtrace", "_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_Find_FDE",
                           "__register_frame_info", "__gcc_personality_v0"}) {
    CAPTURE(std::string(name));
    // Looked up in the library and its own dependencies only (libc and
    // ld.so; in a sanitized build also the sanitizer runtimes, which bring
    // libgcc_s): whatever defines it, it must not be the crash library.
    void* found = ::dlsym(lib, name);
    Dl_info where{};
    if (found != nullptr && ::dladdr(found, &where) != 0 && where.dli_fname != nullptr) {
      CHECK_MESSAGE(std::string(where.dli_fname).find("libpillbox-crash.so") == std::string::npos, where.dli_fname);
    }
  }
  ::dlclose(lib);
}
