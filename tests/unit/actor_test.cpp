// actor_name (supervisor/store/actor.h): PILLBOX_ACTOR names who a program
// runs pillbox for, when it is usable; otherwise the user, as before.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "supervisor/store/actor.h"

using namespace pillbox;

namespace {

// PILLBOX_ACTOR set to `value` for the scope (unset: nullptr), then unset.
class ActorEnv {
 public:
  explicit ActorEnv(const char* value) {
    if (value != nullptr) ::setenv("PILLBOX_ACTOR", value, 1);
    else ::unsetenv("PILLBOX_ACTOR");
  }
  ~ActorEnv() { ::unsetenv("PILLBOX_ACTOR"); }
};

const std::string kTail = " via pillbox reproduce (pid " + std::to_string(::getpid()) + ")";

}  // namespace

TEST_CASE("actor: PILLBOX_ACTOR names who pillbox runs for, with the command and pid") {
  ActorEnv env("web: 127.0.0.1");
  CHECK(actor_name("reproduce") == "web: 127.0.0.1" + kTail);
}

TEST_CASE("actor: an empty, too long or unprintable PILLBOX_ACTOR is ignored: the user is named") {
  std::string user;
  {
    ActorEnv none(nullptr);
    user = actor_name("reproduce");
  }
  CHECK(user.size() > kTail.size());
  CHECK(user.compare(user.size() - kTail.size(), kTail.size(), kTail) == 0);
  const std::string longest(kMaxActorEnvBytes, 'a');
  const std::string too_long(kMaxActorEnvBytes + 1, 'a');
  for (const std::string& bad : {std::string(""), too_long, std::string("web\n: forged"), std::string("tab\there"),
                                 std::string("caf\xc3\xa9"), std::string("del\x7f")}) {
    ActorEnv env(bad.c_str());
    INFO(bad);
    CHECK(actor_name("reproduce") == user);
  }
  ActorEnv fits(longest.c_str());
  CHECK(actor_name("reproduce") == longest + kTail);
}
