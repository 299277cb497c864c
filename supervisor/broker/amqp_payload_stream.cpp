#include "supervisor/broker/amqp_payload_stream.h"

#include <amqp.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/io/random_hex.h"

namespace pillbox::broker {
namespace {

const std::string* header_text(const AmqpMessage& m, std::string_view name) {
  const AmqpValue* v = find_field(m.headers, name);
  return v != nullptr ? v->text() : nullptr;
}

// A stream just declared (by this append, or another one racing it) may
// not be consumable yet: RabbitMQ refuses a consume of it with "does not
// have a replica on the local node" for a moment, or, closer still to its
// declare, closes the connection with INTERNAL_ERROR (seen under load in
// fleet_patch_test). Its end is waited for then, a few times, before
// anything is published (found by two patches of one record at once, the
// first ever on the queue); nothing announces that it is ready.
constexpr int kReplicaTries = 20;
constexpr std::chrono::milliseconds kReplicaPause{100};

bool not_ready_yet(const AmqpConnection& c) {
  if (!c.refusal()) return false;
  if (c.refusal()->code == AMQP_PRECONDITION_FAILED) {
    return c.refusal()->text.find("does not have a replica") != std::string::npos;
  }
  return c.broken() && c.refusal()->code == AMQP_INTERNAL_ERROR;
}

}  // namespace

std::string amqp_minimized_name(const std::string& queue) { return queue + ".dlq.minimized"; }
std::string amqp_revisions_name(const std::string& queue) { return queue + ".dlq.revisions"; }

std::unique_ptr<AmqpPayloadStream> AmqpPayloadStream::minimized(AmqpConnection& connection, const std::string& queue) {
  return std::unique_ptr<AmqpPayloadStream>(
      new AmqpPayloadStream(connection, amqp_minimized_name(queue), std::string(kMinimizedOfHeader)));
}

std::unique_ptr<AmqpPayloadStream> AmqpPayloadStream::revisions(AmqpConnection& connection, const std::string& queue) {
  return std::unique_ptr<AmqpPayloadStream>(
      new AmqpPayloadStream(connection, amqp_revisions_name(queue), std::string(kRevisionOfHeader)));
}

Expected<std::int64_t> AmqpPayloadStream::append(const std::string& id, std::string_view bytes) {
  const std::vector<AmqpField> stream = stream_queue_arguments();
  if (auto declared = c_.declare_queue(name_, stream); !declared) {
    if (c_.refusal() && c_.refusal()->code == AMQP_PRECONDITION_FAILED) {
      return Error{explain_mismatch(name_, "RabbitMQ at " + c_.address().describe(), *c_.refusal(), stream),
                   ErrorCode::kSetup};
    }
    return Error{declared.error(), ErrorCode::kSetup};
  }
  if (auto s = c_.confirm_publishes(); !s) return Error{s.message()};
  // Bodies are not kept: the append is found again by its writer's id.
  AmqpStreamReader reader(c_, name_, 0);
  for (int tries = 1; end_ < 0; ++tries) {
    auto end = reader.end();
    if (!end && not_ready_yet(c_) && tries < kReplicaTries) {
      std::this_thread::sleep_for(kReplicaPause);
      if (c_.broken()) {
        // Closed by the broker: connected again (the connection holds no
        // lock here: patch and minimize take none; a replay, which does,
        // never appends).
        auto again = AmqpConnection::open(c_.address());
        if (!again) return Error{again.error(), ErrorCode::kSetup};
        c_ = std::move(*again);
        if (auto s = c_.confirm_publishes(); !s) return Error{s.message()};
      }
      continue;
    }
    if (!end) return Error{end.error()};
    end_ = *end;
  }
  auto writer = random_hex(8);
  if (!writer) return Error{writer.error()};
  AmqpOutgoing m;
  m.body = bytes;
  m.headers = {{of_header_, id}, {std::string(kPayloadWriterHeader), *writer}};
  if (auto s = c_.publish(name_, m); !s) return Error{s.message()};
  if (auto s = c_.wait_confirmed(); !s) return Error{s.message()};
  // Its offset: read on from an offset known to be before it until it comes back.
  std::int64_t at = -1;
  auto s = reader.read_on(end_, [&](AmqpMessage&& seen) {
    const std::string* w = header_text(seen, kPayloadWriterHeader);
    if (w == nullptr || *w != *writer) return true;
    at = stream_offset(seen);
    return false;
  });
  if (!s) return Error{s.message()};
  if (at < 0) return Error{"the payload appended to " + name_ + " came back without its offset"};
  end_ = at + 1;
  return at;
}

Expected<std::optional<KeptPayloadEntry>> AmqpPayloadStream::entry_at(std::int64_t offset, std::uint64_t most,
                                                                   std::string& why_not) {
  const std::string where = "offset " + std::to_string(offset) + " of " + name_;
  // A stream only grows at its end: an offset below one seen is read at
  // once; one past it would be waited for (end() waits 300 ms).
  if (offset >= end_) {
    if (auto found = c_.check_queue(name_); !found) {
      if (!c_.refusal() || c_.refusal()->code != AMQP_NOT_FOUND) return Error{found.error(), found.error_code()};
      why_not = "its state names " + where + ", and there is no " + name_;
      return std::optional<KeptPayloadEntry>();
    }
    AmqpStreamReader ends(c_, name_, 0);
    auto end = ends.end();
    if (!end) return Error{end.error()};
    end_ = std::max(end_, *end);
    if (offset >= end_) {
      why_not = "its state names " + where + ", which ends before it (at " + std::to_string(end_) + ")";
      return std::optional<KeptPayloadEntry>();
    }
  }
  AmqpStreamReader reader(c_, name_, most);
  std::optional<AmqpMessage> found;
  auto s = reader.read(offset, offset + 1, [&](AmqpMessage&& m) {
    found = std::move(m);
    return false;
  });
  if (!s) return Error{s.message()};
  if (!found || stream_offset(*found) != offset) {
    why_not = where + " is no longer there (removed by a retention policy?)";
    return std::optional<KeptPayloadEntry>();
  }
  KeptPayloadEntry entry;
  if (const std::string* of = header_text(*found, of_header_)) entry.of = *of;
  entry.size = found->body_omitted ? found->body_size : found->body.size();
  if (!found->body_omitted) entry.bytes = std::move(found->body);
  return std::optional<KeptPayloadEntry>(std::move(entry));
}

}  // namespace pillbox::broker
