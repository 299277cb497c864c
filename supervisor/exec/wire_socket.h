#pragma once
// The supervisor's sockets for task wires: a ROUTER on a private ipc://
// endpoint and its monitor, serving one task at a time and kept from task to
// task, because binding per task cost about half the supervisor's CPU.
// A socket serves its next task only when nothing of an earlier task can
// reach it (ready_for_next_task); otherwise it is retired (closed), which
// cuts whatever was left connected. See docs/architecture.md, Wire sockets
// are reused, one task at a time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace pillbox {

class WireSocket {
 public:
  enum class Event { kDisconnected, kHandshakeFailed };

  // Binds ipc://<rundir>/w<id>; a frame over max_frame bytes drops its connection.
  WireSocket(zmq::context_t& ctx, const std::string& rundir, std::uint64_t id, std::size_t max_frame);
  ~WireSocket();
  WireSocket(const WireSocket&) = delete;
  WireSocket& operator=(const WireSocket&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_t& socket() { return sock_; }
  void add_poll_items(std::vector<zmq::pollitem_t>& items);

  // At most `limit` monitor events, oldest first (accepted connections are
  // counted, not returned).
  std::vector<Event> read_events(int limit);

  // Whether the next task may use this socket: every task it served was
  // identified by a valid frame and broke no rule, exactly one connection
  // per task, all reported gone, and nothing left unread.
  bool ready_for_next_task();
  // A task this socket served ended. `clean`: a valid frame identified its
  // connection and it broke no rule; otherwise the socket is retired.
  void task_ended(bool clean);
  bool retired() const { return retired_; }
  // While idle: drains the monitor (libzmq's IO thread blocks on a full
  // monitor queue) and tells whether anything connected since its last
  // task: a straggler or an intruder, so the socket must go.
  bool intruded_while_idle();
  void add_monitor_poll_item(std::vector<zmq::pollitem_t>& items);

 private:
  std::string endpoint_;
  std::string path_;
  zmq::socket_t sock_;
  zmq::socket_t monitor_;
  std::uint64_t accepted_ = 0;
  std::uint64_t disconnected_ = 0;
  std::uint64_t served_ = 0;
  bool retired_ = false;
};

// The idle sockets, for the next tasks. A socket just released is usually
// still waiting for the report of its last child's disconnect; the next
// task takes an older one that is ready, or a new one.
class WirePool {
 public:
  // Keeps at most `keep` idle sockets.
  WirePool(zmq::context_t& ctx, std::string rundir, std::size_t max_frame, std::size_t keep);

  // A socket no earlier task can reach. Throws zmq::error_t when a new one cannot be bound.
  std::unique_ptr<WireSocket> acquire();
  // After the channel of the socket's task ended.
  void release(std::unique_ptr<WireSocket> socket);

  // The idle sockets' monitors, for the dispatcher's poll, so that one
  // reporting anything is tended at once and no monitor queue fills.
  // Returns how many items were added.
  std::size_t add_poll_items(std::vector<zmq::pollitem_t>& items);
  // Reads every idle socket's monitor; retires (closes) those something
  // connected to while idle.
  void tend();

  // For tests: sockets bound so far, and sockets idle now.
  std::uint64_t sockets_bound() const { return next_id_; }
  std::size_t idle() const { return idle_.size(); }

 private:
  zmq::context_t& ctx_;
  std::string rundir_;
  std::size_t max_frame_;
  std::size_t keep_;
  std::vector<std::unique_ptr<WireSocket>> idle_;  // oldest first
  std::uint64_t next_id_ = 0;
};

}  // namespace pillbox
