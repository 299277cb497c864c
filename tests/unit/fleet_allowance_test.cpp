// An operator's allowance of a fleet record (supervisor/broker/
// fleet_allowance.h): kept in the record's state, signed with the fleet
// key, and checked before replay --allowed takes the record, since whoever
// can write the state can write "allowed" into it. Pure: no broker.
#include <doctest/doctest.h>

#include <string>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_allowance.h"
#include "supervisor/broker/fleet_state.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;

const FleetKey kKey(std::string(32, 'k'));
const FleetKey kOtherKey(std::string(32, 'o'));
constexpr const char* kDlq = "jobs:dlq";

FleetRecord record(const std::string& id, const std::string& payload) {
  FleetRecord r;
  r.id = id;
  r.payload = payload;
  r.record.entry.payload_sha256 = sha256_hex(payload);
  return r;
}

// `r` allowed as `quarantine allow` leaves it (signed with `key`, or not), its state through its JSON.
void allow(FleetRecord& r, const FleetKey* key, const std::string& actor = "alice") {
  FleetState s;
  s.status = store::RecordStatus::kAllowed;
  s.updated_at = 1700000000000;
  s.allowance = make_allowance(key, kDlq, r, actor, s.updated_at);
  auto back = parse_state(state_json(s));
  REQUIRE_MESSAGE(back.has_value(), back.error());
  apply_state(r, *back, "");
}

}  // namespace

TEST_CASE("fleet allowance: one signed with the fleet key verifies, and survives the state's JSON") {
  FleetRecord r = record("1700000000000-0", "poison");
  allow(r, &kKey);
  CHECK(r.record.status == store::RecordStatus::kAllowed);
  CHECK(r.state.allowance.actor == "alice");
  CHECK(r.state.allowance.at == 1700000000000);
  CHECK(r.state.allowance.sig.size() == 64);
  CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kValid);
  CHECK(check_allowance(r, Signature::kValid, false).is_ok());
  // Without a key it cannot be told.
  CHECK(allowance_signature(nullptr, kDlq, r) == Signature::kUnchecked);
}

TEST_CASE("fleet allowance: a forged or moved allowance does not verify, and replay --allowed refuses it") {
  FleetRecord r = record("1700000000000-0", "poison");
  SUBCASE("written as status alone (anyone who can write the state)") {
    REQUIRE(parse_state(R"({"status":"allowed","updated_at":1,"audit":[]})").has_value());
    apply_state(r, *parse_state(R"({"status":"allowed","updated_at":1,"audit":[]})"), "");
    CHECK(r.record.status == store::RecordStatus::kAllowed);
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kMissing);
  }
  SUBCASE("allowed without a key") {
    allow(r, nullptr);
    CHECK(r.state.allowance.sig.empty());
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kMissing);
  }
  SUBCASE("another record's allowance copied onto it") {
    FleetRecord other = record("1700000000001-0", "poison");
    allow(other, &kKey);
    FleetState copied = other.state;
    apply_state(r, copied, "");
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kBad);
  }
  SUBCASE("its own allowance, of another payload (the record's bytes changed)") {
    FleetRecord before = record("1700000000000-0", "the payload reviewed");
    allow(before, &kKey);
    apply_state(r, before.state, "");
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kBad);
  }
  SUBCASE("who allowed it, changed") {
    allow(r, &kKey);
    FleetState s = r.state;
    s.allowance.actor = "mallory";
    apply_state(r, s, "");
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kBad);
  }
  SUBCASE("signed for another stream, or with another key") {
    allow(r, &kKey);
    CHECK(allowance_signature(&kKey, "other:dlq", r) == Signature::kBad);
    allow(r, &kOtherKey);
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kBad);
  }
  SUBCASE("a dead letter's signature is no allowance's") {
    allow(r, &kKey);
    FleetState s = r.state;
    s.allowance.sig = kKey.sign(kDlq, {{"record", r.id},
                                       {"payload_sha256", r.record.entry.payload_sha256},
                                       {"actor", s.allowance.actor},
                                       {"at", std::to_string(s.allowance.at)}});
    apply_state(r, s, "");
    CHECK(allowance_signature(&kKey, kDlq, r) == Signature::kBad);
  }
  const Signature found = allowance_signature(&kKey, kDlq, r);
  CHECK(found != Signature::kValid);
  const Status refused = check_allowance(r, found, false);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().starts_with("record 1700000000000-0's allowance"));
  CHECK(refused.message().find("--trust-unsigned") != std::string::npos);
  CHECK(check_allowance(r, found, true).is_ok());  // the operator said so, for that command
}

TEST_CASE("fleet allowance: it is kept only while the record is allowed") {
  FleetRecord r = record("1700000000000-0", "poison");
  allow(r, &kKey);
  FleetState s = r.state;
  s.status = store::RecordStatus::kQuarantined;  // revoked
  auto back = parse_state(state_json(s));
  REQUIRE(back.has_value());
  CHECK(back->allowance.sig.empty());
  CHECK(state_json(*back).find("allowance") == std::string::npos);
  // A state that says quarantined with an allowance beside it is not allowed.
  auto odd = parse_state(R"({"status":"quarantined","allowance":{"at":1,"actor":"a","sig":"00"}})");
  REQUIRE(odd.has_value());
  CHECK(odd->allowance.sig.empty());
  // An allowance of the wrong type is not a state pillbox wrote.
  CHECK_FALSE(parse_state(R"({"status":"allowed","allowance":{"actor":5}})").has_value());
}
