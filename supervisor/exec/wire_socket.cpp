#include "supervisor/exec/wire_socket.h"

#include <unistd.h>

#include <cstring>

namespace pillbox {

WireSocket::WireSocket(zmq::context_t& ctx, const std::string& rundir, std::uint64_t id, std::size_t max_frame)
    : path_(rundir + "/w" + std::to_string(id)),
      sock_(ctx, zmq::socket_type::router),
      monitor_(ctx, zmq::socket_type::pair) {
  endpoint_ = "ipc://" + path_;
  sock_.set(zmq::sockopt::linger, 0);
  // ZeroMQ drops a larger frame and the connection with it; the monitor
  // then reports the disconnect, which is a protocol violation.
  sock_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame));
  sock_.set(zmq::sockopt::router_mandatory, 1);
  sock_.set(zmq::sockopt::rcvhwm, 16);
  const std::string monitor_endpoint = "inproc://monitor-w" + std::to_string(id);
  if (zmq_socket_monitor(sock_.handle(), monitor_endpoint.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
    throw zmq::error_t();
  }
  monitor_.connect(monitor_endpoint);
  sock_.bind(endpoint_);
}

WireSocket::~WireSocket() {
  zmq_socket_monitor(sock_.handle(), nullptr, 0);
  sock_.close();
  monitor_.close();
  ::unlink(path_.c_str());
}

void WireSocket::add_poll_items(std::vector<zmq::pollitem_t>& items) {
  items.push_back({sock_.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({monitor_.handle(), 0, ZMQ_POLLIN, 0});
}

std::vector<WireSocket::Event> WireSocket::read_events(int limit) {
  std::vector<Event> events;
  for (int i = 0; i < limit; ++i) {
    zmq::message_t event;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) break;
    std::uint16_t id = 0;
    if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
    while (event.more()) {
      zmq::message_t rest;
      (void)monitor_.recv(rest, zmq::recv_flags::none);
      event.swap(rest);
    }
    // libzmq reports ACCEPTED before any of the connection's frames can be
    // read, and DISCONNECTED after they were queued, except after a
    // protocol error: frames of that last read come just after the event.
    // Such a frame carries the earlier task's number, so the next task's
    // channel refuses it before its payload is sent (a sandbox-error, never
    // charged) and the socket is retired.
    if (id == ZMQ_EVENT_ACCEPTED) {
      ++accepted_;
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      ++disconnected_;
      events.push_back(Event::kDisconnected);
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      events.push_back(Event::kHandshakeFailed);
    }
  }
  return events;
}

bool WireSocket::ready_for_next_task() {
  if (retired_) return false;
  // The events of finished tasks only count connections. Bounded: the rest
  // of a longer queue is read at the next look.
  (void)read_events(64);
  if (monitor_.get(zmq::sockopt::events) & ZMQ_POLLIN) return false;
  // One connection per task, each accepted and gone. None can wait in the
  // listen backlog: a child connects once, as root, into the 0700 runtime
  // directory, and each task served was identified over its own connection.
  if (accepted_ != served_ || disconnected_ != served_) return false;
  // A frame a child sent after its last one counted (queued before its
  // disconnect was reported) must not reach the next task.
  return (sock_.get(zmq::sockopt::events) & ZMQ_POLLIN) == 0;
}

bool WireSocket::intruded_while_idle() {
  (void)read_events(64);
  // The last task's own ACCEPTED may be read only now (its frames came
  // first, over another pipe): it makes accepted_ equal served_, not more.
  return accepted_ > served_;
}

void WireSocket::add_monitor_poll_item(std::vector<zmq::pollitem_t>& items) {
  items.push_back({monitor_.handle(), 0, ZMQ_POLLIN, 0});
}

void WireSocket::task_ended(bool clean) {
  if (clean) {
    ++served_;
  } else {
    retired_ = true;
  }
}

WirePool::WirePool(zmq::context_t& ctx, std::string rundir, std::size_t max_frame, std::size_t keep)
    : ctx_(ctx), rundir_(std::move(rundir)), max_frame_(max_frame), keep_(keep) {}

std::size_t WirePool::add_poll_items(std::vector<zmq::pollitem_t>& items) {
  for (auto& socket : idle_) socket->add_monitor_poll_item(items);
  return idle_.size();
}

void WirePool::tend() {
  std::erase_if(idle_, [](const std::unique_ptr<WireSocket>& socket) { return socket->intruded_while_idle(); });
}

std::unique_ptr<WireSocket> WirePool::acquire() {
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if ((*it)->ready_for_next_task()) {
      std::unique_ptr<WireSocket> socket = std::move(*it);
      idle_.erase(it);
      return socket;
    }
  }
  return std::make_unique<WireSocket>(ctx_, rundir_, ++next_id_, max_frame_);
}

void WirePool::release(std::unique_ptr<WireSocket> socket) {
  if (!socket || socket->retired()) return;  // closed here: cuts whatever is still connected
  idle_.push_back(std::move(socket));
  // One that never settles (a straggler keeps its connection) gives way.
  if (idle_.size() > keep_) idle_.erase(idle_.begin());
}

}  // namespace pillbox
