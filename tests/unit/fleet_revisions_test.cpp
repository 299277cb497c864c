// quarantine patch on the fleet (supervisor/broker/fleet_revisions.h),
// written once over FleetDeadLetters, here over one kept in memory: a patch
// is the record's next revision (its bytes kept first, then the state that
// names them), refused as the store's is, signed with the fleet key; a
// patch that lost the race to another is refused, never lost; what a redrive
// puts back is the newest revision, only when signed and its bytes are the
// ones its state names. The state's JSON keeps revisions. Pure: no broker
// (tests/e2e/fleet_patch_test.cpp runs it on real ones).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_revisions.h"
#include "supervisor/broker/fleet_state.h"
#include "supervisor/ops/minimize.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;

// Records and their states in memory, as a broker keeps them; a revision's
// bytes by record and sha256, as Redis does.
class MemoryDeadLetters final : public FleetDeadLetters {
 public:
  std::map<std::string, FleetRecord> records;
  std::map<std::string, std::string> states;                              // id -> state_json
  std::map<std::pair<std::string, std::string>, std::string> revision_bytes;  // (id, sha256) -> bytes
  std::optional<FleetKey> key_;
  // Runs once before the next change_state reads the state: another process's change.
  std::function<void()> before_change;

  void add(const std::string& id, const std::string& payload) {
    FleetRecord r;
    r.id = id;
    r.payload = payload;
    r.record.entry.payload_sha256 = sha256_hex(payload);
    r.record.entry.payload_size = static_cast<std::int64_t>(payload.size());
    records[id] = r;
  }
  FleetState state(const std::string& id) { return *parse_state(states[id]); }

  QuarantineCapabilities can() const override { return {.signatures = true, .patches = true}; }
  std::string where() const override { return "memory"; }
  std::string hint_options() const override { return ""; }
  int id_width() const override { return 4; }
  Expected<std::string> parse_id(const std::string& text) const override { return text; }
  void use_key(std::optional<FleetKey> key) override { key_ = std::move(key); }
  const FleetKey* key() const override { return key_ ? &*key_ : nullptr; }
  std::string signed_name() const override { return "jobs:dlq"; }
  Status each(const std::function<bool(const FleetRecord&)>&) override { return Status::ok(); }
  Expected<FleetRecord> get(const std::string& id) override {
    auto it = records.find(id);
    if (it == records.end()) return Error::usage("no record " + id);
    FleetRecord r = it->second;
    auto state = parse_state(states[id]);
    if (!state) return Error{state.error()};
    apply_state(r, *state, "");
    return r;
  }
  store::AuditEntry dead_lettering(const FleetRecord&) const override { return {}; }
  void add_broker_json(const FleetRecord&, nlohmann::json&) const override {}
  Expected<FleetRecord> change_state(const std::string& id, bool, const StateChange& change) override {
    if (before_change) {
      auto other = std::move(before_change);
      before_change = nullptr;
      other();
    }
    auto r = get(id);
    if (!r) return r;
    FleetState s = state(id);
    if (auto ok = change(s, *r); !ok) return Error{ok.message(), ok.code()};
    states[id] = state_json(s);
    return get(id);
  }
  Expected<PayloadBytes> minimized_payload(const FleetRecord&) override { return Error::usage("none"); }
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const std::string&, const std::string&) override { return nullptr; }
  Expected<std::int64_t> keep_revision_payload(const FleetRecord& record, std::string_view bytes) override {
    revision_bytes[{record.id, sha256_hex(bytes)}] = std::string(bytes);
    return std::int64_t{-1};
  }
  Expected<std::string> revision_payload(const FleetRecord& record, const FleetRevision& v) override {
    auto it = revision_bytes.find({record.id, v.payload_sha256});
    if (it == revision_bytes.end()) return Error::usage("its payload is not kept");
    if (sha256_hex(it->second) != v.payload_sha256 ||
        static_cast<std::int64_t>(it->second.size()) != v.payload_size) {
      return Error::usage("its payload does not match the sha256 its state names");
    }
    return it->second;
  }
  Expected<std::vector<FleetRecord>> redrive_plan(const ReplayRun&, std::vector<std::string>&) override {
    return std::vector<FleetRecord>{};
  }
  Expected<ReplayResult> redrive(const ReplayRun&) override { return ReplayResult{}; }
};

PatchRequest request(const std::string& payload, const std::string& note = "fixed by hand") {
  PatchRequest r;
  r.payload = payload;
  r.note = note;
  r.actor = "alice";
  return r;
}

}  // namespace

TEST_CASE("fleet revisions: a patch is the record's next revision, signed, its bytes kept, audited") {
  MemoryDeadLetters q;
  q.use_key(FleetKey(std::string(32, 'k')));
  q.add("7", "S crash");
  auto first = patch_fleet_record(q, "7", request("ok"), 1000);
  REQUIRE_MESSAGE(first.has_value(), first.error());
  CHECK(first->n == 1);
  CHECK(first->payload_sha256 == sha256_hex("ok"));
  CHECK(first->summary == "payload 7 -> 2 bytes, bytes 0-7 replaced by 2 bytes");
  auto second = patch_fleet_record(q, "7", request("ok!"), 2000);
  REQUIRE_MESSAGE(second.has_value(), second.error());
  CHECK(second->n == 2);
  CHECK(second->summary == "payload 2 -> 3 bytes, bytes 2-2 replaced by 1 bytes");  // from revision 1

  const FleetState s = q.state("7");
  REQUIRE(s.revisions.size() == 2);
  CHECK(s.revisions[1].payload_size == 3);
  CHECK(s.revisions[1].sig.size() == 64);
  CHECK(s.audit.back().action == "patched");
  CHECK(s.audit.back().detail == "revision 2 (from revision 1): payload 2 -> 3 bytes, bytes 2-2 replaced by 1 bytes; "
                                 "note: fixed by hand");
  const FleetRecord r = *q.get("7");
  CHECK(revision_signature(q, r, s.revisions[0]) == Signature::kValid);
  auto what = redrive_payload(q, r, false);
  REQUIRE_MESSAGE(what.has_value(), what.error());
  CHECK(what->revision == 2);
  CHECK(what->bytes == "ok!");
  // The state's JSON keeps them as they were.
  CHECK(state_json(*parse_state(state_json(s))) == state_json(s));
  const nlohmann::json shown = fleet_revisions_json(q, r);
  CHECK(shown[1]["n"] == 2);
  CHECK(shown[1]["signature"] == "valid");
  CHECK(shown[1]["note"] == "fixed by hand");
}

TEST_CASE("fleet revisions: the store's refusals, and --set-arg said why; nothing changed") {
  MemoryDeadLetters q;
  q.add("7", "S crash");
  auto refused = [&](const PatchRequest& r, const std::string& said) {
    auto done = patch_fleet_record(q, "7", r, 1000);
    REQUIRE_FALSE(done.has_value());
    CHECK(done.error_code() == ErrorCode::kUsage);
    CHECK_MESSAGE(done.error().find(said) != std::string::npos, done.error());
    CHECK(q.state("7").revisions.empty());
  };
  refused(request("S crash"), "the new payload is the same as the original of record 7");
  refused(request("ok", " "), "a patch needs a note");
  PatchRequest args;
  args.set_args = {{"mode", "lenient"}};
  args.note = "n";
  refused(args, "--set-arg does not apply on the fleet's quarantine: its tasks carry no handler arguments");
  q.states["7"] = R"({"status":"discarded","updated_at":1,"audit":[]})";
  refused(request("ok"), "record 7 is discarded: only an open record");
  q.states["7"] = R"({"status":"resolved","updated_at":1,"audit":[]})";
  refused(request("ok"), "record 7 is resolved");
}

TEST_CASE("fleet revisions: an allowed record goes back to review; a patch beaten by another is refused, not lost") {
  MemoryDeadLetters q;
  q.add("7", "S crash");
  q.states["7"] = R"({"status":"allowed","updated_at":1,"audit":[],"allowance":{"at":1,"actor":"bob","sig":""}})";
  REQUIRE(patch_fleet_record(q, "7", request("ok"), 1000).has_value());
  FleetState s = q.state("7");
  CHECK(s.status == store::RecordStatus::kQuarantined);
  CHECK(s.allowance.actor.empty());
  CHECK(s.audit.back().action == "allowance revoked");

  // Another patch writes revision 2 between this one's read and its write.
  q.before_change = [&] { REQUIRE(patch_fleet_record(q, "7", request("ok other", "theirs"), 1500).has_value()); };
  auto lost = patch_fleet_record(q, "7", request("ok mine", "mine"), 2000);
  REQUIRE_FALSE(lost.has_value());
  CHECK(lost.error_code() == ErrorCode::kUsage);
  CHECK(lost.error().find("record 7 was patched meanwhile (revision 2 by alice): yours was not stored") !=
        std::string::npos);
  s = q.state("7");
  REQUIRE(s.revisions.size() == 2);
  CHECK(s.revisions[1].note == "theirs");
}

TEST_CASE("fleet revisions: a redrive refuses a revision unsigned, another record's, changed, or with other bytes") {
  MemoryDeadLetters q;
  q.add("7", "S crash");
  q.add("8", "S other");
  REQUIRE(patch_fleet_record(q, "7", request("ok"), 1000).has_value());  // no key: unsigned
  q.use_key(FleetKey(std::string(32, 'k')));
  auto refused = [&](const std::string& id, const std::string& said) {
    auto what = redrive_payload(q, *q.get(id), false);
    REQUIRE_FALSE(what.has_value());
    CHECK(what.error_code() == ErrorCode::kUsage);
    CHECK_MESSAGE(what.error().find(said) != std::string::npos, what.error());
  };
  refused("7", "record 7's revision 1 is unsigned");
  CHECK(redrive_payload(q, *q.get("7"), true)->bytes == "ok");  // --trust-unsigned
  REQUIRE(patch_fleet_record(q, "7", request("ok 2"), 2000).has_value());  // with the key: signed
  CHECK(redrive_payload(q, *q.get("7"), false)->revision == 2);

  SUBCASE("another record's revision copied onto it") {
    FleetState theirs = q.state("7");
    q.revision_bytes[{"8", theirs.revisions[1].payload_sha256}] = "ok 2";
    q.states["8"] = state_json(theirs);
    refused("8", "record 8's revision 2 does not match the fleet key");
  }
  SUBCASE("its state made to name other bytes") {
    FleetState s = q.state("7");
    q.revision_bytes[{"7", sha256_hex("pwnd")}] = "pwnd";
    s.revisions[1].payload_sha256 = sha256_hex("pwnd");
    s.revisions[1].payload_size = 4;
    q.states["7"] = state_json(s);
    refused("7", "record 7's revision 2 does not match the fleet key");
  }
  SUBCASE("its bytes swapped where they are kept") {
    q.revision_bytes[{"7", sha256_hex("ok 2")}] = "pwnd";
    refused("7", "record 7's revision 2 cannot be replayed: its payload does not match the sha256");
  }
  SUBCASE("its note rewritten (another operator reviews by it)") {
    FleetState s = q.state("7");
    s.revisions[1].note = "reviewed by security: safe";
    q.states["7"] = state_json(s);
    refused("7", "record 7's revision 2 does not match the fleet key");
  }
  SUBCASE("signed with another key") {
    q.use_key(FleetKey(std::string(32, 'o')));
    refused("7", "does not match the fleet key");
  }
}

TEST_CASE("fleet revisions: an older signed revision copied to the end is never run, key or --trust-unsigned") {
  MemoryDeadLetters q;
  q.add("7", "S crash");
  q.use_key(FleetKey(std::string(32, 'k')));
  REQUIRE(patch_fleet_record(q, "7", request("ok 1"), 1000).has_value());
  REQUIRE(patch_fleet_record(q, "7", request("ok 2"), 2000).has_value());
  FleetState s = q.state("7");
  s.revisions.push_back(s.revisions[0]);  // every field as signed: a rollback by whoever can write the state
  q.states["7"] = state_json(s);
  CHECK(revision_signature(q, *q.get("7"), q.state("7").revisions[2]) == Signature::kValid);
  for (const bool trust_unsigned : {false, true}) {
    auto what = redrive_payload(q, *q.get("7"), trust_unsigned);
    REQUIRE_FALSE(what.has_value());
    CHECK(what.error_code() == ErrorCode::kUsage);
    CHECK_MESSAGE(what.error().find("record 7's newest revision (the last of 3) is numbered 1, not above revision 2 "
                                    "before it") != std::string::npos,
                  what.error());
  }
  // What the refusal says to do: a patch numbers its revision above all, and it runs.
  auto again = patch_fleet_record(q, "7", request("ok 3"), 3000);
  REQUIRE_MESSAGE(again.has_value(), again.error());
  CHECK(again->n == 4);  // above the count of those before it and their numbers
  auto what = redrive_payload(q, *q.get("7"), false);
  REQUIRE_MESSAGE(what.has_value(), what.error());
  CHECK(what->revision == 4);
  CHECK(what->bytes == "ok 3");

  // Numbers up to the int64 limit: refused, never wrapped.
  s = q.state("7");
  s.revisions[0].n = std::numeric_limits<std::int64_t>::max();
  q.states["7"] = state_json(s);
  auto full = patch_fleet_record(q, "7", request("ok 4"), 4000);
  REQUIRE_FALSE(full.has_value());
  CHECK(full.error().find("state numbers a revision at the int64 limit") != std::string::npos);
}

TEST_CASE("fleet revisions: a patch beaten by a forged one names its author as a cell, no terminal escapes") {
  MemoryDeadLetters q;
  q.add("7", "S crash");
  q.before_change = [&] {
    FleetState s = q.state("7");
    FleetRevision v;
    v.n = 1;
    v.actor = "mallory\x1b]0;owned\x07\nfake line";
    s.revisions.push_back(v);
    q.states["7"] = state_json(s);
  };
  auto lost = patch_fleet_record(q, "7", request("ok"), 1000);
  REQUIRE_FALSE(lost.has_value());
  CHECK_MESSAGE(lost.error().find("was patched meanwhile (revision 1 by mallory") != std::string::npos, lost.error());
  CHECK(lost.error().find('\x1b') == std::string::npos);
  CHECK(lost.error().find('\n') == std::string::npos);
}
