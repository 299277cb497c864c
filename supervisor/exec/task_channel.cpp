#include "supervisor/exec/task_channel.h"

#include <unistd.h>

#include <cstring>

namespace pillbox {

TaskChannel::TaskChannel(zmq::context_t& ctx, const std::string& rundir, std::uint64_t seq, const Secret& secret,
                         std::string_view payload, std::size_t max_output, bool exec_mode)
    : path_(rundir + "/t" + std::to_string(seq)),
      seq_(seq),
      secret_(secret),
      payload_(payload),
      max_frame_(max_output + kFrameOverhead),
      exec_mode_(exec_mode),
      sock_(ctx, zmq::socket_type::router),
      monitor_(ctx, zmq::socket_type::pair) {
  endpoint_ = "ipc://" + path_;
  sock_.set(zmq::sockopt::linger, 0);
  // ZeroMQ drops a larger frame and the connection with it; the monitor
  // then reports the disconnect, which is a protocol violation.
  sock_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame_));
  sock_.set(zmq::sockopt::router_mandatory, 1);
  sock_.set(zmq::sockopt::rcvhwm, 16);
  const std::string monitor_endpoint = "inproc://monitor-t" + std::to_string(seq);
  if (zmq_socket_monitor(sock_.handle(), monitor_endpoint.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
    throw zmq::error_t();
  }
  monitor_.connect(monitor_endpoint);
  sock_.bind(endpoint_);
}

TaskChannel::~TaskChannel() {
  zmq_socket_monitor(sock_.handle(), nullptr, 0);
  sock_.close();
  monitor_.close();
  ::unlink(path_.c_str());
}

void TaskChannel::add_poll_items(std::vector<zmq::pollitem_t>& items) {
  items.push_back({sock_.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({monitor_.handle(), 0, ZMQ_POLLIN, 0});
}

void TaskChannel::on_readable() {
  drain_messages();
  for (int i = 0; i < 16; ++i) {
    zmq::message_t event;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) break;
    std::uint16_t id = 0;
    if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
    while (event.more()) {
      zmq::message_t rest;
      (void)monitor_.recv(rest, zmq::recv_flags::none);
      event.swap(rest);
    }
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      violate("the child's ZeroMQ handshake failed (it closed the connection early or sent bytes that are not ZMTP)");
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
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
