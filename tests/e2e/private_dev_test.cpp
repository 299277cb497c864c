// A task's /dev is its own (issue 25, point 3). The host's /dev, and its
// /dev/pts with a writable /dev/ptmx, were the task's: an exec task opened
// 50 ptys that the host saw in its /dev/pts, counting against the host-wide
// kernel.pty.max that ssh and tmux need. Now an exec task with a private
// /tmp sees null, zero, full, random, urandom, its fd links, /dev/shm and a
// devpts instance of its own (at most 16 ptys), in both modes; the host's
// /dev/pts does not change while it holds them.
#include <dirent.h>
#include <doctest/doctest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

std::set<std::string> entries_of(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.insert(name);
    }
    ::closedir(d);
  }
  return names;
}

// Opens up to 50 ptys, says how many in DIR/done.N, waits for DIR/go, and
// prints its /dev and the count.
const char* const kPtyOpener =
    "import os, sys, time\n"
    "d = sys.argv[1]\n"
    "held = []\n"
    "for _ in range(50):\n"
    "    try:\n"
    "        held.append(os.openpty())\n"
    "    except OSError:\n"
    "        break\n"
    "open(os.path.join(d, 'done.%d' % len(held)), 'w').close()\n"
    "deadline = time.time() + 20\n"
    "while not os.path.exists(os.path.join(d, 'go')) and time.time() < deadline:\n"
    "    time.sleep(0.02)\n"
    "print(' '.join(sorted(os.listdir('/dev'))))\n"
    "print(len(held), os.ttyname(held[0][1]) if held else '-')\n";

}  // namespace

TEST_CASE("an exec task's /dev is its own: the host's /dev/pts does not change while it holds 50 ptys") {
  if (::access("/usr/bin/python3", X_OK) != 0) {
    MESSAGE("skipped: /usr/bin/python3 is not installed (the task opens its ptys with os.openpty)");
    return;
  }
  e2e::TempDir scripts(0755, e2e::host_dir_tasks_see());
  const std::string opener = scripts.write("open_ptys.py", kPtyOpener);
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir dir(0777);  // where the task (the slot's uid) says it holds them
    const std::set<std::string> before = entries_of("/dev/pts");
    std::set<std::string> during;
    std::string watcher_error;
    const int stop = ::eventfd(0, EFD_CLOEXEC);
    REQUIRE(stop >= 0);
    std::thread watcher([&] {
      // No doctest assertions on this thread: failures go to watcher_error.
      if (!e2e::wait_for_file(dir.path(), "done.", stop)) {
        watcher_error = "the task ended before it said it held its ptys";
        return;
      }
      during = entries_of("/dev/pts");
      dir.write("go", "");
    });
    const auto r = run_pillbox({"run", "--json", "--no-store", "--max-attempts", "1", "--mode", mode, "--writable",
                                dir.path(), "-", "--", "/usr/bin/python3", opener, dir.path()},
                               e2e::task_line("ptys", "x"));
    const std::uint64_t one = 1;
    (void)!::write(stop, &one, sizeof one);
    watcher.join();
    ::close(stop);
    INFO(r.describe());
    REQUIRE_MESSAGE(watcher_error.empty(), watcher_error);
    CHECK(r.exit_code == 0);
    const std::string out = r.only_record()["output"];
    CHECK(out.rfind("fd full null ptmx pts random shm stderr stdin stdout urandom zero\n", 0) == 0);
    CHECK(out.find("\n16 /dev/pts/0\n") != std::string::npos);  // its own instance, at most 16
    CHECK(during == before);
  }
}
