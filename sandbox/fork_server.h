#pragma once
// The zygote's fork server: a second process, forked from the zygote once it
// is prepared, whose only job is to fork task children.
//
// Why not fork from the zygote itself: after every fork, each page the
// forking process writes is shared copy-on-write with the new child, so the
// zygote's own bookkeeping between two forks (decoding control messages,
// reaping, reading crash pipes, encoding exit reports: heap, stack, malloc
// state) took ~18 copy-on-write faults per task, each with a TLB flush. The
// fork server writes one request buffer and a few stack bytes per fork; the
// zygote, which forks nothing any more, writes its pages privately.
//
// Children are created with CLONE_PARENT, so they are the zygote's children:
// the zygote reaps them, collects their rusage and drains their process
// groups exactly as before, and their parent-death signal follows the zygote.
#include <sys/types.h>


#include "sandbox/child_runtime.h"
#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {

class ForkServer {
 public:
  // Forks the server from the calling process. `close_in_server` are fds the
  // server must not keep (the zygote's control pipes: they are replaced by
  // /dev/null so that the supervisor sees them close when the zygote dies).
  static Expected<ForkServer> start(const PreparedChild& prep, std::initializer_list<int> close_in_server);

  // One child for this task, given its ends of the streams. Returns the
  // child's pid (as this process sees it).
  Expected<pid_t> fork_child(const TaskTicket& ticket, const ChildFds& fds);

  pid_t pid() const { return pid_; }
  // False once the server stopped answering: no child can be forked any more.
  bool reachable() const { return reachable_; }

 private:
  ForkServer(UniqueFd sock, pid_t pid) : sock_(std::move(sock)), pid_(pid) {}
  UniqueFd sock_;
  pid_t pid_ = -1;
  bool reachable_ = true;
};

}  // namespace pillbox::sandbox
