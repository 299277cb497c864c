#pragma once
// The child's end of the wire: a ZeroMQ DEALER speaking ZMTP 3.0 (NULL
// mechanism) directly over a unix stream socket, without libzmq.
//
// Why not libzmq here: a libzmq context starts two threads and several
// eventfds in every child. On each task that cost milliseconds (thread
// creation, TLB shootdowns on copy-on-write faults, setuid broadcast to every
// thread), needed extra syscalls under seccomp, and its connection is
// asynchronous, which forced an extra round trip before dropping privileges.
// This client is single-threaded and synchronous: connect(2) completes as root,
// the greeting and READY go out right after it (HELLO later, once the child
// is confined), and the supervisor side stays a libzmq ROUTER socket that
// cannot tell the difference.
#include <cstddef>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {

class ZmtpClient {
 public:
  // Opens and connects the unix socket of an "ipc://PATH" endpoint. Nothing
  // is sent yet; call this while the path is still reachable (before
  // dropping privileges and before seccomp).
  static Expected<ZmtpClient> connect(const std::string& endpoint);

  // Sends our greeting and READY command. Call it right after connect():
  // the peer's answer then arrives while the child confines itself.
  Status start_handshake(int timeout_ms);

  // Sends one single-part message. libzmq treats anything that arrives
  // before its own READY went out as a (bad) handshake command, so this
  // first reads the peer's greeting and READY when not done yet.
  Status send(std::string_view message, int timeout_ms);

  // Receives one single-part message of at most max_bytes. Reads the peer's
  // greeting and READY first when not done yet; answers PING commands.
  Expected<std::string> receive(int timeout_ms, std::size_t max_bytes);

  int fd() const { return fd_.get(); }

 private:
  explicit ZmtpClient(UniqueFd fd) : fd_(std::move(fd)) {}
  Status write_all(std::string_view bytes, long long deadline_ns);
  Status read_exact(char* out, std::size_t n, long long deadline_ns);
  Status read_handshake(long long deadline_ns);

  UniqueFd fd_;
  bool sent_handshake_ = false;
  bool read_handshake_ = false;
};

// Encoders shared with tests: the 64-byte greeting, a READY command for a
// socket type, and a message frame.
std::string zmtp_greeting();
std::string zmtp_ready_command(std::string_view socket_type);
std::string zmtp_message_frame(std::string_view body);

}  // namespace pillbox::sandbox
