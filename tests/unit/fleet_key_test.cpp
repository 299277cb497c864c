// The fleet key (supervisor/broker/fleet_key.h): HMAC-SHA-256 over a dead
// letter's canonical fields; a change to any field, a field added, a copy
// into another stream or a second `sig` makes it bad; the key file's checks.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <string>

#include "supervisor/broker/fleet_key.h"
#include "shared/sha256.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox::broker;

namespace {

SignedFields letter() {
  return {{"key", "k1"}, {"payload", std::string("S\0crash", 7)}, {"kind", "crash"}, {"fingerprint", "pb1-ab"},
          {"record", R"({"policy":"[policy]"})"}};
}

SignedFields signed_letter(const FleetKey& key, const std::string& dlq = "jobs:dlq") {
  SignedFields f = letter();
  f.emplace_back("sig", key.sign(dlq, f));
  return f;
}

}  // namespace

TEST_CASE("fleet key: a signed dead letter verifies; any change, addition, other stream or other key is bad") {
  const FleetKey key(std::string(32, 'k'));
  const SignedFields f = signed_letter(key);
  CHECK(f.back().second.size() == 64);
  CHECK(key.verify("jobs:dlq", f) == Signature::kValid);
  CHECK(key.verify("other:dlq", f) == Signature::kBad);
  CHECK(FleetKey(std::string(32, 'x')).verify("jobs:dlq", f) == Signature::kBad);
  for (std::size_t i = 0; i + 1 < f.size(); ++i) {
    CAPTURE(f[i].first);
    SignedFields changed = f;
    changed[i].second += "!";
    CHECK(key.verify("jobs:dlq", changed) == Signature::kBad);
  }
  SignedFields added = f;
  added.emplace_back("record", "{}");  // a repeated field: not the one signed
  CHECK(key.verify("jobs:dlq", added) == Signature::kBad);
  SignedFields two_sigs = f;
  two_sigs.emplace_back("sig", f.back().second);
  CHECK(key.verify("jobs:dlq", two_sigs) == Signature::kBad);
  SignedFields none = letter();
  CHECK(key.verify("jobs:dlq", none) == Signature::kMissing);
  // Field order in the entry does not matter (Redis keeps what was written).
  SignedFields reordered(f.rbegin(), f.rend());
  CHECK(key.verify("jobs:dlq", reordered) == Signature::kValid);
}

TEST_CASE("fleet key: a listing that left the payload unread checks the record's claimed hash instead") {
  const FleetKey key(std::string(40, 'k'));
  SignedFields f = signed_letter(key);
  const std::string sha = pillbox::sha256_hex(std::string("S\0crash", 7));
  for (auto& [name, value] : f) {
    if (name == "payload") value = "";  // as the page script leaves it
  }
  CHECK(key.verify("jobs:dlq", f, &sha) == Signature::kValid);
  const std::string other = pillbox::sha256_hex("other");
  CHECK(key.verify("jobs:dlq", f, &other) == Signature::kBad);
}

TEST_CASE("fleet key: the file must be this user's, 0600 or stricter, 32 bytes to 4 KiB") {
  pillbox::test::ScratchDir s{"fleet-key"};
  const std::string good = s.write("good.key", std::string(64, 'a'));
  REQUIRE(::chmod(good.c_str(), 0600) == 0);
  CHECK(FleetKey::load(good).has_value());
  REQUIRE(::chmod(good.c_str(), 0640) == 0);
  auto readable = FleetKey::load(good);
  REQUIRE_FALSE(readable.has_value());
  CHECK(readable.error() == "fleet key " + good + " has mode 0640: others may read the secret; chmod 600 " + good);
  const std::string small = s.write("small.key", "short");
  REQUIRE(::chmod(small.c_str(), 0600) == 0);
  auto too_small = FleetKey::load(small);
  REQUIRE_FALSE(too_small.has_value());
  CHECK(too_small.error().find("holds 5 bytes; a key has at least 32") != std::string::npos);
  const std::string big = s.write("big.key", std::string(5000, 'b'));
  REQUIRE(::chmod(big.c_str(), 0600) == 0);
  CHECK_FALSE(FleetKey::load(big).has_value());
  CHECK_FALSE(FleetKey::load(s.path).has_value());  // a directory
  auto missing = FleetKey::load(s.path + "/none");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().find("openssl rand -hex 32") != std::string::npos);
}
