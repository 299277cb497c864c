#pragma once
// The supervisor's end of one task's wire: the protocol state machine of
// wire.h over a socket that serves one task at a time (wire_socket.h).
// Every byte from the child is hostile: the first frame that breaks the
// protocol records a violation and the dispatcher kills the child.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "shared/wire.h"
#include "supervisor/exec/wire_socket.h"

namespace pillbox {

class TaskChannel {
 public:
  enum class Phase { kAwaitHello, kAwaitResult, kDone };

  // Serves task `seq` on `wire`, which must outlive the channel and serve no
  // other task meanwhile (WireSocket::ready_for_next_task). `payload` must
  // outlive the channel too. `max_frame` is the wire's frame cap.
  TaskChannel(WireSocket& wire, std::uint64_t seq, const Secret& secret, std::string_view payload,
              std::size_t max_frame, bool exec_mode);
  ~TaskChannel();
  TaskChannel(const TaskChannel&) = delete;
  TaskChannel& operator=(const TaskChannel&) = delete;

  const std::string& endpoint() const { return wire_.endpoint(); }
  void add_poll_items(std::vector<zmq::pollitem_t>& items);
  // Handles whatever is readable on the socket or the monitor.
  void on_readable();

  Phase phase() const { return phase_; }
  bool payload_delivered() const { return payload_delivered_; }
  const std::optional<Frame>& result() const { return result_; }
  const std::optional<std::string>& setup_failure() const { return setup_failure_; }
  const std::string& violation() const { return violation_; }
  int ignored_frames() const { return ignored_frames_; }
  // The child's connection is gone (it exited, crashed, or ZeroMQ dropped it).
  // Everything it sent before is already readable when this turns true.
  bool disconnected() const { return disconnected_; }
  // True once nothing more can come from the child over the wire.
  bool finished() const { return phase_ == Phase::kDone || !violation_.empty() || disconnected_; }

 private:
  void drain_messages();
  void on_frame(const zmq::message_t& peer, std::string_view bytes);
  void send(FrameType type, std::string_view data = {});
  void violate(std::string why);

  WireSocket& wire_;
  std::uint64_t seq_;
  Secret secret_;
  std::string_view payload_;
  std::size_t max_frame_;
  bool exec_mode_;
  zmq::socket_t& sock_;
  std::string peer_;          // routing id of the child that said HELLO
  bool identified_ = false;   // a frame with this task's number and secret came from peer_
  Phase phase_ = Phase::kAwaitHello;
  bool payload_delivered_ = false;
  std::optional<Frame> result_;
  std::optional<std::string> setup_failure_;
  std::string violation_;
  int ignored_frames_ = 0;
  bool disconnected_ = false;
};

}  // namespace pillbox
