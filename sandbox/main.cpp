// pillbox-sandbox: the child-side runtime. Not meant to be run by hand:
//   pillbox-sandbox --zygote   control messages on stdin/stdout (see sandbox/zygote.h)
//   pillbox-sandbox --child    spawn mode: one task; config and ticket on fd 3
//   pillbox-sandbox --check    spawn mode: validate a config (fd 3) before the run
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "sandbox/child_runtime.h"
#include "sandbox/exit_codes.h"
#include "sandbox/namespaces.h"
#include "sandbox/zygote.h"
#include "shared/control.h"
#include "shared/crash_report.h"
#include "shared/seccomp_notify.h"

namespace {

constexpr int kBootstrapFd = 3;

int run_spawned_child() {
  using namespace pillbox;
  auto config = read_control_blocking(kBootstrapFd, 1u << 20);
  auto ticket = read_control_blocking(kBootstrapFd, 1u << 20);
  ::close(kBootstrapFd);
  if (!config || config->type != ControlType::kConfig || !ticket || ticket->type != ControlType::kFork) {
    std::fprintf(stderr, "pillbox-sandbox: bad bootstrap on fd %d\n", kBootstrapFd);
    return sandbox::kExitBootstrap;
  }
  auto prep = sandbox::prepare_child(config->config, /*check_deferred=*/false);
  if (!prep) {
    std::fprintf(stderr, "pillbox-sandbox: %s\n", prep.error().c_str());
    return sandbox::kExitBootstrap;
  }
  prep->parent_pid = ::getppid();
  const bool exec = prep->config.exec_mode();
  sandbox::ChildFds fds;
  fds.crash_write = kCrashFd;
  fds.listener_socket = kListenerSocketFd;
  fds.stdout_fd = exec ? 1 : -1;
  fds.stderr_fd = exec ? 2 : -1;
  sandbox::run_child(*prep, ticket->ticket, fds, prep->config.use_namespaces);
}

// Spawn mode's up-front check of a configuration (fd 3: one CONFIG message):
// prepares the handler and the seccomp filter exactly as a child would.
int check_config() {
  using namespace pillbox;
  auto config = read_control_blocking(kBootstrapFd, 1u << 20);
  if (!config || config->type != ControlType::kConfig) {
    std::fprintf(stderr, "bad configuration message on fd %d\n", kBootstrapFd);
    return kCheckExitSetupFailed;
  }
  auto prep = sandbox::prepare_child(config->config);
  if (!prep) {
    std::fprintf(stderr, "%s\n", prep.error().c_str());
    return prep.error_code() == ErrorCode::kConfig ? kCheckExitConfigInvalid : kCheckExitSetupFailed;
  }
  // What each spawned child will get: this throwaway process enters the same
  // namespaces, and says what the host refused, so the run can warn once
  // (a child's own attempt has no one to tell).
  if (config->config.use_namespaces) {
    for (const auto& w : sandbox::enter_namespaces(config->config.policy.isolation).warnings) {
      std::fprintf(stderr, "warning: %s\n", w.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--zygote") == 0) return pillbox::sandbox::run_zygote();
  if (argc == 2 && std::strcmp(argv[1], "--child") == 0) return run_spawned_child();
  if (argc == 2 && std::strcmp(argv[1], "--check") == 0) return check_config();
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("pillbox-sandbox %s\n", PILLBOX_VERSION);
    return 0;
  }
  std::fprintf(stderr,
               "pillbox-sandbox is started by pillbox; it is not a command to run by hand.\n"
               "usage: pillbox-sandbox --zygote | --child | --check | --version\n");
  return 2;
}
