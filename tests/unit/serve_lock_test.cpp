// take_serve_lock: one pillbox serve per token file; the lock beside it
// names the holder, and only a lock file of ours is ever written into.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "supervisor/serve/serve_lock.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox::serve;

TEST_CASE("serve lock: beside the token file; a second taker is told who holds it; another file is never written") {
  pillbox::test::ScratchDir scratch("serve-lock");
  CHECK(serve_lock_path("/s/serve.token") == "/s/serve.lock");
  CHECK(serve_lock_path("/s/mine") == "/s/mine.lock");
  const std::string token = scratch.path + "/serve.token";
  auto held = take_serve_lock(token, "http://127.0.0.1:1/");
  REQUIRE(held);
  struct stat st {};
  REQUIRE(::stat((scratch.path + "/serve.lock").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // flock is per open file: a second open in another process is refused.
  const pid_t child = ::fork();
  if (child == 0) {
    auto again = take_serve_lock(token, "http://127.0.0.1:2/");
    const bool named = !again && again.error().find("(pid " + std::to_string(::getppid()) + ", http://127.0.0.1:1/)") !=
                                     std::string::npos;
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  // Someone else's file of that name, hard-linked: refused, left as it was.
  const std::string other = scratch.write("precious", "not a lock\n");
  const std::string linked_token = scratch.path + "/linked.token";
  REQUIRE(::link(other.c_str(), (scratch.path + "/linked.lock").c_str()) == 0);
  auto refused = take_serve_lock(linked_token, "http://127.0.0.1:3/");
  REQUIRE(!refused);
  CHECK(refused.error().find("is not a lock file of pillbox serve") != std::string::npos);
  std::ifstream in(other);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "not a lock\n");
}
