#include "supervisor/exec/task_channel.h"

namespace pillbox {

TaskChannel::TaskChannel(WireSocket& wire, std::uint64_t seq, const Secret& secret, std::string_view payload,
                         std::size_t max_frame, bool exec_mode)
    : wire_(wire),
      seq_(seq),
      secret_(secret),
      payload_(payload),
      max_frame_(max_frame),
      exec_mode_(exec_mode),
      sock_(wire.socket()) {}

TaskChannel::~TaskChannel() {
  // Only a task whose own connection was identified by a valid frame, and
  // that broke no rule, lets the socket serve the next task of the slot.
  wire_.task_ended(identified_ && violation_.empty());
}

void TaskChannel::add_poll_items(std::vector<zmq::pollitem_t>& items) { wire_.add_poll_items(items); }

void TaskChannel::on_readable() {
  drain_messages();
  for (WireSocket::Event event : wire_.read_events(16)) {
    if (event == WireSocket::Event::kHandshakeFailed) {
      violate("the child's ZeroMQ handshake failed (it closed the connection early or sent bytes that are not ZMTP)");
    } else if (event == WireSocket::Event::kDisconnected) {
      // The connection's messages were queued before its end was reported:
      // read them before judging.
      drain_messages();
      disconnected_ = true;
      const bool expected = phase_ == Phase::kDone || (exec_mode_ && payload_delivered_);
      if (!expected) {
        violate("the child closed the wire while " +
                std::string(phase_ == Phase::kAwaitHello ? "setting up" : "expected to send its result") +
                " (it exited or crashed, or sent a frame over the " + std::to_string(max_frame_) +
                "-byte cap, which ZeroMQ drops together with the connection)");
      }
    }
  }
}

void TaskChannel::drain_messages() {
  // Bounded per call so one flooding child cannot starve the others.
  for (int i = 0; i < 64 && violation_.empty(); ++i) {
    zmq::message_t peer, body;
    if (!sock_.recv(peer, zmq::recv_flags::dontwait)) break;
    if (!peer.more()) {
      violate("malformed ZeroMQ envelope");
      break;
    }
    (void)sock_.recv(body, zmq::recv_flags::none);
    bool extra = body.more();
    while (extra) {  // a DEALER may send multipart messages; the protocol has none
      zmq::message_t rest;
      (void)sock_.recv(rest, zmq::recv_flags::none);
      extra = rest.more();
      violate("multipart message (the protocol sends one frame per message)");
    }
    if (violation_.empty()) on_frame(peer, std::string_view(static_cast<const char*>(body.data()), body.size()));
  }
}

void TaskChannel::on_frame(const zmq::message_t& peer, std::string_view bytes) {
  const std::string peer_id(static_cast<const char*>(peer.data()), peer.size());
  if (!peer_.empty() && peer_id != peer_) {
    ++ignored_frames_;  // another process that found the endpoint; it cannot speak for this task
    return;
  }
  auto frame = decode_frame(bytes, max_frame_);
  if (!frame) return violate(frame.error());
  if (frame->task != seq_) return violate("frame for task " + std::to_string(frame->task) + " on the channel of task " + std::to_string(seq_));
  if (!secrets_equal(frame->secret, secret_)) return violate("forged frame: wrong task secret");
  const FrameType t = frame->type;
  switch (phase_) {
    case Phase::kAwaitHello:
      peer_ = peer_id;
      identified_ = true;
      if (t == FrameType::kSetupFailed) {
        setup_failure_ = frame->message;
        phase_ = Phase::kDone;
        return;
      }
      if (t != FrameType::kHello) return violate(std::string("expected HELLO, got ") + std::string(to_string(t)));
      phase_ = Phase::kAwaitResult;
      send(FrameType::kTask, payload_);
      payload_delivered_ = true;
      return;
    case Phase::kAwaitResult:
      if (t != FrameType::kResult) return violate(std::string("expected RESULT, got ") + std::string(to_string(t)));
      if (exec_mode_ != (frame->status == ResultStatus::kExecFailed)) {
        return violate(exec_mode_ ? "RESULT frame from an exec-mode child (only exec failures are reported that way)"
                                  : "exec-failure RESULT from an in-process handler");
      }
      result_ = std::move(*frame);
      phase_ = Phase::kDone;
      return;
    case Phase::kDone:
      return violate(std::string("unexpected ") + std::string(to_string(t)) + " after the end of the conversation");
  }
}

void TaskChannel::send(FrameType type, std::string_view data) {
  Frame f;
  f.type = type;
  f.task = seq_;
  f.secret = secret_;
  f.data = std::string(data);
  const std::string bytes = encode_frame(f);
  try {
    sock_.send(zmq::buffer(peer_), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    sock_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    violate(std::string("cannot send ") + std::string(to_string(type)) + " to the child: " + e.what());
  }
}

void TaskChannel::violate(std::string why) {
  if (violation_.empty()) violation_ = std::move(why);
}

}  // namespace pillbox
