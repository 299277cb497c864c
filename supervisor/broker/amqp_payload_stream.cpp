#include "supervisor/broker/amqp_payload_stream.h"

#include <amqp.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/io/random_hex.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::broker {
namespace {

constexpr std::string_view kWriterHeader = "pillbox-writer";

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

AmqpPayloadStream AmqpPayloadStream::minimized(AmqpConnection& connection, const std::string& queue) {
  return AmqpPayloadStream(connection, amqp_minimized_name(queue), "pillbox-minimized-of");
}

AmqpPayloadStream AmqpPayloadStream::revisions(AmqpConnection& connection, const std::string& queue) {
  return AmqpPayloadStream(connection, amqp_revisions_name(queue), "pillbox-revision-of");
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
  m.headers = {{of_header_, id}, {std::string(kWriterHeader), *writer}};
  if (auto s = c_.publish(name_, m); !s) return Error{s.message()};
  if (auto s = c_.wait_confirmed(); !s) return Error{s.message()};
  // Its offset: read on from an offset known to be before it until it comes back.
  std::int64_t at = -1;
  auto s = reader.read_on(end_, [&](AmqpMessage&& seen) {
    const std::string* w = header_text(seen, kWriterHeader);
    if (w == nullptr || *w != *writer) return true;
    at = stream_offset(seen);
    return false;
  });
  if (!s) return Error{s.message()};
  if (at < 0) return Error{"the payload appended to " + name_ + " came back without its offset"};
  end_ = at + 1;
  return at;
}

Expected<std::optional<std::string>> AmqpPayloadStream::read(std::int64_t offset, const std::string& id,
                                                            const std::string& sha256, std::uint64_t most,
                                                            const std::string& most_is, std::string& why_not) {
  const std::string where = "offset " + std::to_string(offset) + " of " + name_;
  if (offset < 0) {
    why_not = "its state names no offset of " + name_ + " for it";
    return std::optional<std::string>();
  }
  // A stream only grows at its end: an offset below one seen is read at
  // once; one past it would be waited for (end() waits 300 ms).
  if (offset >= end_) {
    if (auto found = c_.check_queue(name_); !found) {
      if (!c_.refusal() || c_.refusal()->code != AMQP_NOT_FOUND) return Error{found.error(), found.error_code()};
      why_not = "its state names " + where + ", and there is no " + name_;
      return std::optional<std::string>();
    }
    AmqpStreamReader ends(c_, name_, 0);
    auto end = ends.end();
    if (!end) return Error{end.error()};
    end_ = std::max(end_, *end);
    if (offset >= end_) {
      why_not = "its state names " + where + ", which ends before it (at " + std::to_string(end_) + ")";
      return std::optional<std::string>();
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
    return std::optional<std::string>();
  }
  const std::string* of = header_text(*found, of_header_);
  if (of == nullptr || *of != id) {
    why_not = where + " is not a payload of record " + id;
    return std::optional<std::string>();
  }
  if (found->body_omitted) {
    why_not = where + " is " + std::to_string(found->body_size) + " bytes, more than " + most_is + " (" +
              std::to_string(most) + ")";
    return std::optional<std::string>();
  }
  if (sha256_hex(found->body) != sha256) {
    // The sha256 is the state's claim: shown as a table cell.
    why_not = where + " does not match the sha256 its state names (" + table_cell(sha256, 80) + ")";
    return std::optional<std::string>();
  }
  return std::optional<std::string>(std::move(found->body));
}

}  // namespace pillbox::broker
