#include "supervisor/serve/redis_console_source.h"

namespace pillbox::serve {
namespace {

FleetNames names_of(const broker::RedisAddress& address, const std::string& stream) {
  return {"Redis", address.describe(), broker::fleet_location(address, broker::fleet_keys(stream)), "stream " + stream,
          {"--redis", address.describe(), "--stream", stream}};
}

}  // namespace

Expected<std::unique_ptr<RedisSource>> RedisSource::open(const broker::RedisAddress& address,
                                                         const std::string& stream, FleetTrust trust) {
  auto fleet = broker::FleetQuarantine::open(address, stream);
  if (!fleet) return Error{fleet.error(), fleet.error_code()};
  return std::unique_ptr<RedisSource>(new RedisSource(address, stream, std::move(*fleet), std::move(trust)));
}

RedisSource::RedisSource(broker::RedisAddress address, std::string stream, broker::FleetQuarantine fleet,
                         FleetTrust trust)
    : FleetSource(names_of(address, stream), std::move(trust)),
      address_(std::move(address)),
      stream_(std::move(stream)),
      fleet_(std::move(fleet)) {
  use(*fleet_);
}

bool RedisSource::answers() {
  // A connection Redis dropped since the last request (a restart) is found
  // by a PING, not by this request failing.
  return fleet_ && !fleet_->redis().broken() && fleet_->redis().command({"PING"});
}

broker::FleetDeadLetters* RedisSource::connect(ApiReply& error) {
  auto redis = broker::RedisConnection::open(address_);
  if (!redis) {
    error = unreachable(redis.error());
    return nullptr;
  }
  auto opened = broker::FleetQuarantine::open(std::move(*redis), stream_);
  if (!opened) {
    // Redis answered: a key of another type is said as it is (500), not as
    // Redis being out of reach.
    error = error_reply(500, opened.error());
    return nullptr;
  }
  fleet_.emplace(std::move(*opened));
  return &*fleet_;
}

FleetSource::Link RedisSource::link() {
  if (!fleet_) return Link::kUp;
  if (fleet_->redis().broken()) return Link::kBroken;
  return fleet_->redis().busy() ? Link::kBusy : Link::kUp;
}

Expected<std::unique_ptr<broker::FleetDeadLetters>> RedisSource::open_apart() const {
  auto q = broker::FleetQuarantine::open(address_, stream_);
  if (!q) return Error{q.error(), q.error_code()};
  return std::unique_ptr<broker::FleetDeadLetters>(std::make_unique<broker::FleetQuarantine>(std::move(*q)));
}

}  // namespace pillbox::serve
