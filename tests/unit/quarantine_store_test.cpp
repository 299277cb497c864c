// The quarantine store, its content-addressed payloads and the task ledger:
// real SQLite files in a fresh scratch directory.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/payload_store.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/result_store.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/store.h"
#include "tests/unit/store_fixture.h"

using namespace pillbox;
using namespace pillbox::store;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Bytes of every value, `size` long, different for each `seed`.
std::string bytes_of(std::size_t size, unsigned seed) {
  std::string out(size, '\0');
  std::uint32_t x = seed * 2654435761u + 1;
  for (char& c : out) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

// A store with its quarantine and ledger, in a scratch directory.
struct Env : pillbox::test::StoreFixture {
  explicit Env(std::int64_t max_records = kDefaultMaxRecords) : StoreFixture("quarantine-test", max_records) {}

  // Quarantines `payload` under `key` in a transaction of its own.
  InsertResult add(const std::string& key, const std::string& payload, const std::string& fingerprint,
                   std::int64_t now, const std::string& kind = "crash") {
    REQUIRE(ledger->begin().is_ok());
    const QuarantineEntry e = entry(key, payload, fingerprint, now, kind);
    auto r = qs->insert(e, payload, now, "test");
    REQUIRE_MESSAGE(r.has_value(), r.error());
    const Status committed = ledger->commit();
    REQUIRE_MESSAGE(committed.is_ok(), committed.message());
    return *r;
  }

  void set_status(std::int64_t id, const std::string& status) {
    const Status s = db().exec("UPDATE quarantine SET status='" + status + "' WHERE id=" + std::to_string(id));
    REQUIRE_MESSAGE(s.is_ok(), s.message());
  }

  std::vector<std::int64_t> ids(const ListFilter& filter) {
    auto records = qs->list(filter);
    REQUIRE_MESSAGE(records.has_value(), records.error());
    std::vector<std::int64_t> out;
    for (const auto& r : *records) out.push_back(r.id);
    return out;
  }

  std::string payload_path(const std::string& sha) const {
    return dir + "/payloads/" + sha.substr(0, 2) + "/" + sha;
  }
};

using Ids = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("quarantine store: insert and get round-trip every field") {
  Env env;
  const std::string payload = bytes_of(300, 1) + std::string("\0tail", 5);
  REQUIRE(env.ledger->begin().is_ok());
  auto started = env.ledger->start_attempt("input-17.bin", sha256_hex(payload), 305, 1'700'000'000'000);
  REQUIRE(started.has_value());
  QuarantineEntry e;
  e.task_id = started->task_id;
  e.key = "input-17.bin";
  e.source = "fuzz";
  e.handler = "exec";
  e.handler_identity = "exec:/usr/bin/parse@abc";
  e.handler_args = R"({"mode":"strict"})";
  e.exec_argv = R"(["/usr/bin/parse","--strict"])";
  e.policy_identity = "policy-sha-1";
  e.policy = "limits { memory 64M }\nseccomp default";
  e.payload_sha256 = sha256_hex(payload);
  e.payload_size = 305;
  e.kind = "seccomp-violation";
  e.fingerprint = "fp-0123456789abcdef";
  e.crash_state = {"parse_header", "main"};
  e.message = "denied syscall: ptrace\nsecond line";
  e.signal = 31;
  e.syscall = "ptrace";
  e.exit_code = 159;
  e.cpu_ms = 12;
  e.wall_ms = 34;
  e.max_rss_kb = 5678;
  e.origin = R"({"seed":"input seeds/a.bin","mutations":"flip-bit,dict-insert"})";
  e.working_dir = "/srv/parsers";
  auto r = env.qs->insert(e, payload, 1'700'000'000'123, "tester");
  REQUIRE_MESSAGE(r.has_value(), r.error());
  REQUIRE(env.ledger->commit().is_ok());
  CHECK(r->id > 0);
  CHECK(r->new_fingerprint);
  CHECK_FALSE(r->folded);

  auto got = env.qs->get(r->id);
  REQUIRE_MESSAGE(got.has_value(), got.error());
  REQUIRE(got->has_value());
  const QuarantineRecord& rec = **got;
  const QuarantineEntry& g = rec.entry;
  CHECK(rec.id == r->id);
  CHECK(g.task_id == e.task_id);
  CHECK(g.key == e.key);
  CHECK(g.source == e.source);
  CHECK(g.origin == e.origin);
  CHECK(g.handler == e.handler);
  CHECK(g.handler_identity == e.handler_identity);
  CHECK(g.handler_args == e.handler_args);
  CHECK(g.exec_argv == e.exec_argv);
  CHECK(g.working_dir == e.working_dir);
  CHECK(g.policy_identity == e.policy_identity);
  CHECK(g.policy == e.policy);
  CHECK(g.payload_sha256 == e.payload_sha256);
  CHECK(g.payload_size == e.payload_size);
  CHECK(g.kind == e.kind);
  CHECK(g.fingerprint == e.fingerprint);
  CHECK(g.crash_state == e.crash_state);
  CHECK(g.message == e.message);
  CHECK(g.signal == e.signal);
  CHECK(g.syscall == e.syscall);
  CHECK(g.exit_code == e.exit_code);
  CHECK(g.cpu_ms == e.cpu_ms);
  CHECK(g.wall_ms == e.wall_ms);
  CHECK(g.max_rss_kb == e.max_rss_kb);
  CHECK(rec.status == RecordStatus::kQuarantined);
  CHECK(rec.repeats == 0);
  CHECK(rec.created_at == 1'700'000'000'123);
  CHECK(rec.updated_at == 1'700'000'000'123);

  auto bytes = env.qs->payloads().get(e.payload_sha256);
  REQUIRE_MESSAGE(bytes.has_value(), bytes.error());
  CHECK(*bytes == payload);

  // Absent ids are no record, not an error.
  auto missing = env.qs->get(r->id + 1000);
  REQUIRE(missing.has_value());
  CHECK_FALSE(missing->has_value());
}

TEST_CASE("quarantine store: an entry with empty optional fields and an empty payload round-trips") {
  Env env;
  REQUIRE(env.ledger->begin().is_ok());
  QuarantineEntry e = env.entry("empty", "", "fp-empty", 5000, "crash");
  e.message.clear();
  auto r = env.qs->insert(e, "", 5000, "test");
  REQUIRE_MESSAGE(r.has_value(), r.error());
  REQUIRE(env.ledger->commit().is_ok());
  auto got = env.qs->get(r->id);
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK((*got)->entry.syscall.empty());
  CHECK((*got)->entry.message.empty());
  CHECK((*got)->entry.exit_code == -1);
  CHECK((*got)->entry.source == "run");
  auto bytes = env.qs->payloads().get(sha256_hex(""));
  REQUIRE_MESSAGE(bytes.has_value(), bytes.error());
  CHECK(bytes->empty());
}

TEST_CASE("quarantine store: a record must name a task of the ledger") {
  Env env;
  REQUIRE(env.ledger->begin().is_ok());
  QuarantineEntry e = env.entry("k", "payload", "fp", 1000);
  e.task_id = 987654;
  auto r = env.qs->insert(e, "payload", 1000, "test");
  CHECK_FALSE(r.has_value());
  // Rolled back: neither the record nor the task nor the payload remain.
  env.ledger.reset();
  CHECK(env.count("SELECT count(*) FROM quarantine") == 0);
  CHECK(env.count("SELECT count(*) FROM tasks") == 0);
  CHECK(env.count("SELECT count(*) FROM payloads") == 0);
}

TEST_CASE("quarantine store: list is newest first and filters by status, kind and fingerprint") {
  Env env;
  const std::int64_t r1 = env.add("k1", "p1", "fp-a", 1000, "crash").id;
  const std::int64_t r2 = env.add("k2", "p2", "fp-b", 2000, "oom").id;
  const std::int64_t r3 = env.add("k3", "p3", "fp-b", 3000, "crash").id;
  const std::int64_t r4 = env.add("k4", "p4", "fp-a", 4000, "crash").id;
  env.set_status(r4, "resolved");

  CHECK(env.ids({}) == Ids{r4, r3, r2, r1});

  ListFilter f;
  f.status = RecordStatus::kQuarantined;
  CHECK(env.ids(f) == Ids{r3, r2, r1});
  f.status = RecordStatus::kResolved;
  CHECK(env.ids(f) == Ids{r4});
  f.status = RecordStatus::kDiscarded;
  CHECK(env.ids(f).empty());

  f = {};
  f.kind = "crash";
  CHECK(env.ids(f) == Ids{r4, r3, r1});
  f.kind = "oom";
  CHECK(env.ids(f) == Ids{r2});

  f = {};
  f.fingerprint = "fp-b";
  CHECK(env.ids(f) == Ids{r3, r2});
  f.fingerprint = "fp-a";
  f.kind = "crash";
  f.status = RecordStatus::kQuarantined;
  CHECK(env.ids(f) == Ids{r1});
  f.fingerprint = "fp-none";
  CHECK(env.ids(f).empty());

  f = {};
  f.limit = 2;
  CHECK(env.ids(f) == Ids{r4, r3});
  f.offset = 1;
  CHECK(env.ids(f) == Ids{r3, r2});
  f.offset = 3;
  CHECK(env.ids(f) == Ids{r1});
  f.limit = -1;
  f.offset = 2;
  CHECK(env.ids(f) == Ids{r2, r1});
  f.offset = 10;
  CHECK(env.ids(f).empty());
  f = {};
  f.kind = "crash";
  f.limit = 1;
  f.offset = 1;
  CHECK(env.ids(f) == Ids{r3});

  // Records are full in the list too.
  auto listed = env.qs->list({});
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 4);
  CHECK((*listed)[0].status == RecordStatus::kResolved);
  CHECK((*listed)[0].entry.key == "k4");
  CHECK((*listed)[3].entry.kind == "crash");
  CHECK((*listed)[2].entry.kind == "oom");

  // Records created in the same millisecond: the later insert first.
  const std::int64_t r5 = env.add("k5", "p5", "fp-c", 9000).id;
  const std::int64_t r6 = env.add("k6", "p6", "fp-c", 9000).id;
  f = {};
  f.fingerprint = "fp-c";
  CHECK(env.ids(f) == Ids{r6, r5});
}

TEST_CASE("quarantine store: every record status goes into SQL and comes back as itself") {
  Env env;
  const std::int64_t id = env.add("key", "payload", "fp-a", 1000).id;
  std::int64_t now = 2000;
  for (RecordStatus status : kAllRecordStatuses) {
    const std::string word(to_string(status));
    CAPTURE(word);
    // The schema's CHECK takes the enum's word ...
    const Status set = env.qs->set_status(id, status, ++now, "op", "test", "to " + word);
    REQUIRE_MESSAGE(set.is_ok(), set.message());
    CHECK(env.count("SELECT count(*) FROM quarantine WHERE status = '" + word + "'") == 1);
    // ... and reading it gives the enum back, by get and by a filter on it.
    auto got = env.qs->get(id);
    REQUIRE_MESSAGE(got.has_value(), got.error());
    REQUIRE(got->has_value());
    CHECK((*got)->status == status);
    ListFilter f;
    f.status = status;
    CHECK(env.ids(f) == std::vector<std::int64_t>{id});
  }
}

TEST_CASE("quarantine store: a status the enum does not know is an error when read, not a guess") {
  Env env;
  const std::int64_t id = env.add("key", "payload", "fp-a", 1000).id;
  // Only a store written by another build could hold one: the CHECK is
  // relaxed here the way such a schema would be.
  REQUIRE(env.db().exec("PRAGMA ignore_check_constraints = ON").is_ok());
  env.set_status(id, "archived");
  auto got = env.qs->get(id);
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error().find("unknown status 'archived'") != std::string::npos);
  auto listed = env.qs->list({});
  REQUIRE_FALSE(listed.has_value());
  CHECK(listed.error().find("unknown status 'archived'") != std::string::npos);
}

TEST_CASE("quarantine store: the same payload bytes are stored once") {
  Env env;
  const std::string payload = "the same poison";
  const InsertResult a = env.add("k1", payload, "fp-a", 1000);
  const InsertResult b = env.add("k2", payload, "fp-b", 2000);
  CHECK(a.id != b.id);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 2);
  CHECK(env.count("SELECT count(*) FROM payloads") == 1);
  CHECK(env.count("SELECT size FROM payloads") == static_cast<std::int64_t>(payload.size()));
  // Small payloads live in the database: no payload directory.
  CHECK_FALSE(std::filesystem::exists(env.dir + "/payloads"));
  auto bytes = env.qs->payloads().get(sha256_hex(payload));
  REQUIRE(bytes.has_value());
  CHECK(*bytes == payload);

  // PayloadStore::put computes the hash and dedups as well.
  REQUIRE(env.ledger->begin().is_ok());
  auto sha = env.qs->payloads().put(payload, 3000);
  REQUIRE(sha.has_value());
  CHECK(*sha == sha256_hex(payload));
  REQUIRE(env.ledger->commit().is_ok());
  CHECK(env.count("SELECT count(*) FROM payloads") == 1);
  CHECK(env.count("SELECT created_at FROM payloads") == 1000);

  auto unknown = env.qs->payloads().get(sha256_hex("never stored"));
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error() == "store: no payload " + sha256_hex("never stored"));
}

TEST_CASE("quarantine store: a payload over 64 KiB lives in a 0600 file under payloads/XX/") {
  Env env;
  const std::string big = bytes_of(kInlinePayloadBytes + 1, 7);
  const std::string sha = sha256_hex(big);
  const InsertResult r = env.add("big", big, "fp-big", 1000);
  const std::string path = env.payload_path(sha);
  CHECK(env.qs->payloads().file_path(sha) == path);
  REQUIRE(std::filesystem::exists(path));
  CHECK(mode_of(path) == 0600);
  CHECK(mode_of(env.dir + "/payloads") == 0700);
  CHECK(mode_of(env.dir + "/payloads/" + sha.substr(0, 2)) == 0700);
  CHECK(read_file(path) == big);
  CHECK(env.count("SELECT count(*) FROM payloads WHERE data IS NULL") == 1);
  CHECK(env.count("SELECT size FROM payloads") == static_cast<std::int64_t>(big.size()));
  // Nothing but the file itself is left in its directory (no temporaries).
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(env.dir + "/payloads/" + sha.substr(0, 2))) {
    CHECK(entry.path().filename() == sha);
    ++entries;
  }
  CHECK(entries == 1);

  auto got = env.qs->payloads().get(sha);
  REQUIRE_MESSAGE(got.has_value(), got.error());
  CHECK(*got == big);
  auto rec = env.qs->get(r.id);
  REQUIRE(rec.has_value());
  REQUIRE(rec->has_value());
  CHECK((*rec)->entry.payload_size == static_cast<std::int64_t>(big.size()));

  // Exactly 64 KiB is still inline.
  const std::string edge = bytes_of(kInlinePayloadBytes, 8);
  env.add("edge", edge, "fp-edge", 2000);
  CHECK_FALSE(std::filesystem::exists(env.payload_path(sha256_hex(edge))));
  CHECK(env.count("SELECT count(*) FROM payloads WHERE data IS NOT NULL") == 1);
  auto edge_bytes = env.qs->payloads().get(sha256_hex(edge));
  REQUIRE(edge_bytes.has_value());
  CHECK(*edge_bytes == edge);

  // The same big bytes again: one file, one row.
  env.add("big-again", big, "fp-big", 3000);
  CHECK(env.count("SELECT count(*) FROM payloads WHERE data IS NULL") == 1);
}

TEST_CASE("quarantine store: damaged payloads are refused, in a file or inline") {
  Env env;
  const std::string big = bytes_of(100'000, 9);
  const std::string sha = sha256_hex(big);
  env.add("big", big, "fp-big", 1000);
  {
    std::string tampered = big;
    tampered[50'000] = static_cast<char>(tampered[50'000] ^ 0x01);
    std::ofstream out(env.payload_path(sha), std::ios::binary | std::ios::trunc);
    out.write(tampered.data(), static_cast<std::streamsize>(tampered.size()));
  }
  auto got = env.qs->payloads().get(sha);
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error().find("damaged") != std::string::npos);
  CHECK(got.error().find(sha) != std::string::npos);

  // A missing file is an error too.
  REQUIRE(::unlink(env.payload_path(sha).c_str()) == 0);
  auto gone = env.qs->payloads().get(sha);
  REQUIRE_FALSE(gone.has_value());
  CHECK(gone.error().find("cannot read payload") != std::string::npos);

  const std::string small = "small poison";
  env.add("small", small, "fp-small", 2000);
  REQUIRE(env.db().exec("UPDATE payloads SET data = X'00' WHERE sha256 = '" + sha256_hex(small) + "'").is_ok());
  auto damaged = env.qs->payloads().get(sha256_hex(small));
  REQUIRE_FALSE(damaged.has_value());
  CHECK(damaged.error().find("damaged") != std::string::npos);
}

TEST_CASE("quarantine store: new_fingerprint is true only the first time") {
  Env env;
  CHECK(env.add("k1", "p1", "fp-a", 1000).new_fingerprint);
  CHECK_FALSE(env.add("k2", "p2", "fp-a", 2000).new_fingerprint);
  CHECK_FALSE(env.add("k3", "p3", "fp-a", 3000).new_fingerprint);
  CHECK(env.add("k4", "p4", "fp-b", 4000).new_fingerprint);
  CHECK_FALSE(env.add("k5", "p5", "fp-b", 5000).new_fingerprint);
  // A known fingerprint stays known whatever the status of its records.
  ListFilter f;
  f.fingerprint = "fp-a";
  for (std::int64_t id : env.ids(f)) env.set_status(id, "resolved");
  CHECK_FALSE(env.add("k6", "p6", "fp-a", 6000).new_fingerprint);
}

TEST_CASE("quarantine store: over capacity, the oldest resolved or discarded record is evicted") {
  Env env(3);
  const std::int64_t r1 = env.add("k1", "p1", "fp-a", 1000).id;
  const std::int64_t r2 = env.add("k2", "p2", "fp-b", 2000).id;
  const std::int64_t r3 = env.add("k3", "p3", "fp-c", 3000).id;
  REQUIRE(env.qs->audit(r1, 1500, "op", "note", "looked at it").is_ok());
  env.set_status(r2, "discarded");
  env.set_status(r1, "resolved");
  // Every record counts: full. The oldest of the resolved/discarded ones (r1)
  // makes room, even for a fingerprint already on file.
  const InsertResult r4 = env.add("k4", "p4", "fp-c", 4000);
  CHECK_FALSE(r4.folded);
  CHECK_FALSE(r4.new_fingerprint);
  CHECK(env.ids({}) == Ids{r4.id, r3, r2});
  CHECK(env.count("SELECT count(*) FROM audit WHERE record_id = " + std::to_string(r1)) == 0);
  auto gone = env.qs->get(r1);
  REQUIRE(gone.has_value());
  CHECK_FALSE(gone->has_value());

  // Then r2, the only evictable one left.
  const InsertResult r5 = env.add("k5", "p5", "fp-e", 5000);
  CHECK_FALSE(r5.folded);
  CHECK(r5.new_fingerprint);
  CHECK(env.ids({}) == Ids{r5.id, r4.id, r3});
  CHECK(env.count("SELECT count(*) FROM quarantine") == 3);

  // Nothing evictable: a known fingerprint folds, a new one passes the limit.
  CHECK(env.add("k6", "p6", "fp-c", 6000).folded);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 3);
  const InsertResult r7 = env.add("k7", "p7", "fp-new", 7000);
  CHECK_FALSE(r7.folded);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 4);
}

TEST_CASE("quarantine store: full with nothing to evict, a known fingerprint is folded into its newest record") {
  Env env(3);
  const std::int64_t r1 = env.add("k1", "p1", "fp-a", 1000).id;
  const std::int64_t r2 = env.add("k2", "p2", "fp-a", 2000).id;
  const std::int64_t r3 = env.add("k3", "p3", "fp-b", 3000).id;

  const std::string payload = "p4, not kept";
  const InsertResult r = env.add("k4", payload, "fp-a", 4000);
  CHECK(r.folded);
  CHECK(r.id == r2);
  CHECK_FALSE(r.new_fingerprint);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 3);
  CHECK(env.ids({}) == Ids{r3, r2, r1});

  auto newest = env.qs->get(r2);
  REQUIRE(newest.has_value());
  REQUIRE(newest->has_value());
  CHECK((*newest)->repeats == 1);
  CHECK((*newest)->updated_at == 4000);
  CHECK((*newest)->created_at == 2000);
  auto oldest = env.qs->get(r1);
  REQUIRE(oldest.has_value());
  REQUIRE(oldest->has_value());
  CHECK((*oldest)->repeats == 0);

  CHECK(env.count("SELECT count(*) FROM audit") == 1);
  CHECK(env.count("SELECT count(*) FROM audit WHERE record_id = " + std::to_string(r2) +
                  " AND action = 'repeat' AND actor = 'test' AND at = 4000") == 1);
  auto detail = env.db().query_text("SELECT detail FROM audit WHERE action = 'repeat'");
  REQUIRE(detail.has_value());
  CHECK(detail->find("'k4'") != std::string::npos);
  CHECK(detail->find(sha256_hex(payload)) != std::string::npos);
  // The payload was not kept.
  CHECK(env.count("SELECT count(*) FROM payloads WHERE sha256 = '" + sha256_hex(payload) + "'") == 0);
  CHECK(env.count("SELECT count(*) FROM payloads") == 3);

  // Again: two repeats, two audit rows.
  const InsertResult again = env.add("k5", "p5", "fp-a", 5000);
  CHECK(again.folded);
  CHECK(again.id == r2);
  CHECK(env.count("SELECT repeats FROM quarantine WHERE id = " + std::to_string(r2)) == 2);
  CHECK(env.count("SELECT count(*) FROM audit WHERE action = 'repeat'") == 2);
}

TEST_CASE("quarantine store: add_repeats counts on the newest unresolved record of a fingerprint") {
  Env env;
  CHECK(env.add("a", "payload a", "fp-1", 1000).id == 1);
  CHECK(env.add("b", "payload b", "fp-1", 2000).id == 2);
  CHECK(env.add("c", "payload c", "fp-2", 3000).id == 3);
  auto counted = [&](const std::string& fp, std::int64_t n, const std::string& detail) {
    REQUIRE(env.ledger->begin().is_ok());
    auto id = env.qs->add_repeats(fp, n, 4000, "fuzzer", detail);
    REQUIRE_MESSAGE(id.has_value(), id.error());
    REQUIRE(env.ledger->commit().is_ok());
    return *id;
  };
  CHECK(counted("fp-1", 5, "") == 2);  // the newest
  CHECK(env.count("SELECT repeats FROM quarantine WHERE id = 2") == 5);
  CHECK(env.count("SELECT repeats FROM quarantine WHERE id = 1") == 0);
  CHECK(env.count("SELECT count(*) FROM audit") == 0);  // no detail: counts only
  // A resolved bug seen again is news: not counted on the resolved record.
  env.set_status(2, "resolved");
  CHECK(counted("fp-1", 2, "fuzz session: 2 more") == 1);
  CHECK(env.count("SELECT repeats FROM quarantine WHERE id = 1") == 2);
  CHECK(env.count("SELECT count(*) FROM audit WHERE record_id = 1 AND action = 'repeat' AND detail = 'fuzz session: 2 more'") == 1);
  env.set_status(1, "resolved");
  CHECK(counted("fp-1", 1, "x") == 0);  // none open: the caller records it anew
  CHECK(counted("fp-unknown", 1, "x") == 0);
  CHECK(env.count("SELECT sum(repeats) FROM quarantine") == 7);
}

TEST_CASE("quarantine store: full with nothing to evict, a new fingerprint is kept anyway") {
  Env env(3);
  env.add("k1", "p1", "fp-a", 1000);
  env.add("k2", "p2", "fp-b", 2000);
  env.add("k3", "p3", "fp-c", 3000);
  const InsertResult r = env.add("k4", "p4", "fp-new", 4000);
  CHECK_FALSE(r.folded);
  CHECK(r.new_fingerprint);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 4);
  CHECK(env.count("SELECT count(*) FROM payloads") == 4);
  CHECK(env.count("SELECT count(*) FROM audit") == 0);
  const InsertResult r5 = env.add("k5", "p5", "fp-newer", 5000);
  CHECK_FALSE(r5.folded);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 5);
  // Over the limit, a known fingerprint is still folded.
  CHECK(env.add("k6", "p6", "fp-new", 6000).folded);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 5);
}

TEST_CASE("quarantine store: purge removes old records of the given statuses, their audit and lone payloads") {
  Env env;
  const std::string shared = "shared payload";
  const std::string big = bytes_of(kInlinePayloadBytes + 100, 11);
  const std::int64_t p1 = env.add("k1", shared, "fp-1", 100).id;   // resolved, old
  const std::int64_t p2 = env.add("k2", "p2", "fp-2", 200).id;     // quarantined, old
  const std::int64_t p3 = env.add("k3", big, "fp-3", 300).id;      // discarded, old, file payload
  const std::int64_t p4 = env.add("k4", "p4", "fp-4", 400).id;     // failed-again, old
  const std::int64_t p5 = env.add("k5", shared, "fp-5", 5000).id;  // resolved, new, shares p1's payload
  env.set_status(p1, "resolved");
  env.set_status(p3, "discarded");
  env.set_status(p4, "failed-again");
  env.set_status(p5, "resolved");
  for (std::int64_t id : {p1, p2, p3, p4, p5}) {
    REQUIRE(env.qs->audit(id, 6000, "op", "note", "seen").is_ok());
    REQUIRE(env.qs->audit(id, 6001, "op", "note", "seen again").is_ok());
  }
  const std::string big_file = env.payload_path(sha256_hex(big));
  REQUIRE(std::filesystem::exists(big_file));
  REQUIRE(env.count("SELECT count(*) FROM payloads") == 4);

  auto purged = env.qs->purge(1000, {RecordStatus::kResolved, RecordStatus::kDiscarded});
  REQUIRE_MESSAGE(purged.has_value(), purged.error());
  CHECK(purged->records == 2);
  CHECK(purged->payloads == 1);
  CHECK(env.ids({}) == Ids{p5, p4, p2});
  CHECK(env.count("SELECT count(*) FROM audit WHERE record_id IN (" + std::to_string(p1) + ", " +
                  std::to_string(p3) + ")") == 0);
  CHECK(env.count("SELECT count(*) FROM audit") == 6);
  // p3's payload row is gone, and its file; the shared one stays.
  CHECK(env.count("SELECT count(*) FROM payloads WHERE sha256 = '" + sha256_hex(big) + "'") == 0);
  CHECK_FALSE(std::filesystem::exists(big_file));
  auto kept = env.qs->payloads().get(sha256_hex(shared));
  REQUIRE(kept.has_value());
  CHECK(*kept == shared);
  CHECK(env.count("SELECT count(*) FROM payloads") == 3);
  // The ledger keeps its tasks.
  CHECK(env.count("SELECT count(*) FROM tasks") == 5);

  // The cutoff is exclusive: p2 was created at 200.
  auto none = env.qs->purge(200, {});
  REQUIRE(none.has_value());
  CHECK(none->records == 0);
  CHECK(none->payloads == 0);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 3);

  // No statuses: every status, here p2 (quarantined) and p4 (failed-again).
  auto all_old = env.qs->purge(1000, {});
  REQUIRE(all_old.has_value());
  CHECK(all_old->records == 2);
  CHECK(all_old->payloads == 2);
  CHECK(env.ids({}) == Ids{p5});
  CHECK(env.count("SELECT count(*) FROM audit") == 2);

  auto rest = env.qs->purge(10'000, {RecordStatus::kResolved});
  REQUIRE(rest.has_value());
  CHECK(rest->records == 1);
  CHECK(rest->payloads == 1);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 0);
  CHECK(env.count("SELECT count(*) FROM payloads") == 0);
  CHECK(env.count("SELECT count(*) FROM audit") == 0);
}

TEST_CASE("quarantine store: purge_candidates shows what purge would delete; purge deletes no more open records than confirmed") {
  Env env;
  const std::int64_t p1 = env.add("k1", "p1", "fp-1", 100).id;  // quarantined (open)
  const std::int64_t p2 = env.add("k2", "p2", "fp-2", 200).id;  // resolved
  const std::int64_t p3 = env.add("k3", "p3", "fp-3", 300).id;  // failed-again (open)
  env.add("k4", "p4", "fp-4", 5000);                            // too new
  env.set_status(p2, "resolved");
  env.set_status(p3, "failed-again");

  auto plan = env.qs->purge_candidates(1000, {});
  REQUIRE_MESSAGE(plan.has_value(), plan.error());
  REQUIRE(plan->size() == 3);
  CHECK((*plan)[0].id == p1);  // oldest first
  CHECK((*plan)[0].status == RecordStatus::kQuarantined);
  CHECK((*plan)[0].key == "k1");
  CHECK((*plan)[1].status == RecordStatus::kResolved);
  CHECK((*plan)[2].id == p3);
  auto resolved_only = env.qs->purge_candidates(1000, {RecordStatus::kResolved});
  REQUIRE(resolved_only.has_value());
  CHECK(resolved_only->size() == 1);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 4);  // nothing deleted

  // One open record confirmed, two open now (p3 opened after the question):
  // nothing deleted, a usage error.
  auto refused = env.qs->purge(1000, {}, 1);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error_code() == ErrorCode::kUsage);
  CHECK(refused.error().find("2 of these records are open now, more than the 1 confirmed") != std::string::npos);
  CHECK(env.count("SELECT count(*) FROM quarantine") == 4);
  CHECK(env.count("SELECT count(*) FROM payloads") == 4);

  auto purged = env.qs->purge(1000, {}, 2);
  REQUIRE_MESSAGE(purged.has_value(), purged.error());
  CHECK(purged->records == 3);
  CHECK(purged->open_records == 2);
  CHECK(purged->ids == std::vector<std::int64_t>{p1, p2, p3});
  CHECK(env.count("SELECT count(*) FROM quarantine") == 1);
}

TEST_CASE("quarantine store: ledger numbers attempts per task and remembers how they ended") {
  Env env;
  Ledger& ledger = *env.ledger;
  const std::string sha = sha256_hex("payload");
  CHECK(ledger.job() == "handler-id");
  CHECK(ledger.run_id() > 0);

  auto none = ledger.find("key", sha);
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());

  REQUIRE(ledger.begin().is_ok());
  CHECK(ledger.in_batch());
  auto a1 = ledger.start_attempt("key", sha, 7, 1000);
  auto a2 = ledger.start_attempt("key", sha, 7, 2000);
  REQUIRE(a1.has_value());
  REQUIRE(a2.has_value());
  REQUIRE(ledger.commit().is_ok());
  CHECK_FALSE(ledger.in_batch());
  REQUIRE(ledger.begin().is_ok());
  auto a3 = ledger.start_attempt("key", sha, 7, 3000);
  REQUIRE(a3.has_value());
  REQUIRE(ledger.commit().is_ok());
  CHECK(a1->n == 1);
  CHECK(a2->n == 2);
  CHECK(a3->n == 3);
  CHECK(a1->task_id == a2->task_id);
  CHECK(a1->task_id == a3->task_id);
  CHECK(env.count("SELECT count(*) FROM tasks") == 1);
  CHECK(env.count("SELECT attempts FROM tasks") == 3);
  CHECK(env.count("SELECT payload_size FROM tasks") == 7);
  CHECK(env.count("SELECT count(*) FROM attempts") == 3);
  CHECK(env.count("SELECT count(DISTINCT run_id) FROM attempts") == 1);
  const std::int64_t task = a1->task_id;

  // Nothing ended yet: every attempt unfinished.
  auto found = ledger.find("key", sha);
  REQUIRE_MESSAGE(found.has_value(), found.error());
  REQUIRE(found->has_value());
  CHECK((*found)->id == task);
  CHECK((*found)->state == TaskState::kPending);
  CHECK((*found)->attempts == 3);
  REQUIRE((*found)->history.size() == 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const AttemptSummary& s = (*found)->history[i];
    CHECK(s.n == i + 1);
    CHECK_FALSE(s.finished);
    CHECK(s.kind.empty());
    CHECK(s.fingerprint.empty());
    CHECK(s.charged);
  }

  REQUIRE(ledger.begin().is_ok());
  REQUIRE(ledger.end_attempt(task, 1, 1100, "crash", "fp-a", "SIGSEGV", true).is_ok());
  REQUIRE(ledger.end_attempt(task, 3, 3100, "killed", "fp-k", "", false).is_ok());
  REQUIRE(ledger.commit().is_ok());
  found = ledger.find("key", sha);
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  REQUIRE((*found)->history.size() == 3);
  const auto& h = (*found)->history;
  CHECK(h[0].finished);
  CHECK(h[0].kind == "crash");
  CHECK(h[0].fingerprint == "fp-a");
  CHECK(h[0].charged);
  CHECK_FALSE(h[1].finished);
  CHECK(h[2].finished);
  CHECK(h[2].kind == "killed");
  CHECK(h[2].fingerprint == "fp-k");
  CHECK_FALSE(h[2].charged);

  // uncharge: no longer held against the payload.
  REQUIRE(ledger.begin().is_ok());
  REQUIRE(ledger.uncharge(task, 1).is_ok());
  REQUIRE(ledger.commit().is_ok());
  found = ledger.find("key", sha);
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK((*found)->history[0].finished);
  CHECK_FALSE((*found)->history[0].charged);
  CHECK((*found)->history[1].charged);

  REQUIRE(ledger.begin().is_ok());
  REQUIRE(ledger.set_state(task, TaskState::kGaveUp, 4000).is_ok());
  REQUIRE(ledger.commit().is_ok());
  found = ledger.find("key", sha);
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK((*found)->state == TaskState::kGaveUp);

  REQUIRE(ledger.begin().is_ok());
  REQUIRE(ledger.set_state(task, TaskState::kOk, 5000).is_ok());
  REQUIRE(ledger.commit().is_ok());
  found = ledger.find("key", sha);
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK((*found)->state == TaskState::kOk);
  CHECK((*found)->attempts == 3);
  CHECK(env.count("SELECT updated_at FROM tasks") == 5000);

  // Not a state the schema knows (the Ledger's API cannot name one: SQL can).
  REQUIRE(ledger.begin().is_ok());
  CHECK_FALSE(env.db().exec("UPDATE tasks SET state = 'bogus', updated_at = 6000 WHERE id = " + std::to_string(task)).is_ok());
  REQUIRE(ledger.commit().is_ok());
}

TEST_CASE("quarantine store: every task state goes into the ledger and comes back as itself") {
  Env env;
  Ledger& ledger = *env.ledger;
  const std::string sha = sha256_hex("payload");
  REQUIRE(ledger.begin().is_ok());
  auto started = ledger.start_attempt("key", sha, 7, 1000);
  REQUIRE_MESSAGE(started.has_value(), started.error());
  REQUIRE(ledger.commit().is_ok());
  CHECK(started->state == TaskState::kPending);
  std::int64_t now = 2000;
  for (TaskState state : kAllTaskStates) {
    const std::string word(to_string(state));
    CAPTURE(word);
    REQUIRE(ledger.begin().is_ok());
    const Status set = ledger.set_state(started->task_id, state, ++now);
    REQUIRE_MESSAGE(set.is_ok(), set.message());
    REQUIRE(ledger.commit().is_ok());
    CHECK(env.count("SELECT count(*) FROM tasks WHERE state = '" + word + "'") == 1);
    auto found = ledger.find("key", sha);
    REQUIRE_MESSAGE(found.has_value(), found.error());
    REQUIRE(found->has_value());
    CHECK((*found)->state == state);
  }
  // A finished task is not started again: start_attempt says how it finished.
  REQUIRE(ledger.begin().is_ok());
  REQUIRE(ledger.set_state(started->task_id, TaskState::kQuarantined, ++now).is_ok());
  auto again = ledger.start_attempt("key", sha, 7, ++now);
  REQUIRE(ledger.commit().is_ok());
  REQUIRE_MESSAGE(again.has_value(), again.error());
  CHECK(again->n == 0);
  CHECK(again->state == TaskState::kQuarantined);
}

TEST_CASE("quarantine store: ledger tasks are per job, key and payload hash, and survive a reopen") {
  Env env;
  const std::string sha_a = sha256_hex("a");
  const std::string sha_b = sha256_hex("b");
  REQUIRE(env.ledger->begin().is_ok());
  auto first = env.ledger->start_attempt("key", sha_a, 1, 1000);
  auto other_payload = env.ledger->start_attempt("key", sha_b, 1, 1000);
  auto other_key = env.ledger->start_attempt("key2", sha_a, 1, 1000);
  REQUIRE(first.has_value());
  REQUIRE(other_payload.has_value());
  REQUIRE(other_key.has_value());
  REQUIRE(env.ledger->commit().is_ok());
  CHECK(other_payload->n == 1);
  CHECK(other_key->n == 1);
  CHECK(first->task_id != other_payload->task_id);
  CHECK(first->task_id != other_key->task_id);
  CHECK(env.count("SELECT count(*) FROM tasks") == 3);

  // Another handler identity is another job: it does not see these tasks.
  auto other = Ledger::open(env.db(), "other-handler", "policy-id");
  REQUIRE(other.has_value());
  CHECK(other->run_id() != env.ledger->run_id());
  auto not_seen = other->find("key", sha_a);
  REQUIRE(not_seen.has_value());
  CHECK_FALSE(not_seen->has_value());
  REQUIRE(other->begin().is_ok());
  auto theirs = other->start_attempt("key", sha_a, 1, 2000);
  REQUIRE(theirs.has_value());
  REQUIRE(other->commit().is_ok());
  CHECK(theirs->n == 1);
  CHECK(theirs->task_id != first->task_id);

  // An uncommitted batch is rolled back when the ledger goes away.
  {
    auto doomed = Ledger::open(env.db(), "handler-id", "policy-id");
    REQUIRE(doomed.has_value());
    REQUIRE(doomed->begin().is_ok());
    auto never = doomed->start_attempt("key", sha_a, 1, 3000);
    REQUIRE(never.has_value());
    CHECK(never->n == 2);
  }
  env.qs.reset();
  env.ledger.reset();
  env.store.reset();

  auto reopened = Store::open(env.dir);
  REQUIRE_MESSAGE(reopened.has_value(), reopened.error());
  auto ledger = Ledger::open(reopened->db(), "handler-id", "policy-id");
  REQUIRE(ledger.has_value());
  auto found = ledger->find("key", sha_a);
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK((*found)->id == first->task_id);
  CHECK((*found)->attempts == 1);
  REQUIRE((*found)->history.size() == 1);
  CHECK_FALSE((*found)->history[0].finished);
  REQUIRE(ledger->begin().is_ok());
  auto next = ledger->start_attempt("key", sha_a, 1, 4000);
  REQUIRE(next.has_value());
  REQUIRE(ledger->commit().is_ok());
  CHECK(next->n == 2);
}

namespace {

TEST_CASE("ledger: --rerun starts a task that is ok again; without it, an ok task is not started") {
  Env env;
  Ledger& ledger = *env.ledger;
  const std::string sha = sha256_hex("p");
  REQUIRE(ledger.begin().is_ok());
  auto first = ledger.start_attempt("k", sha, 1, 1000);
  REQUIRE(first.has_value());
  REQUIRE(ledger.set_state(first->task_id, TaskState::kOk, 1001).is_ok());
  auto skipped = ledger.start_attempt("k", sha, 1, 1002);
  REQUIRE(skipped.has_value());
  CHECK(skipped->n == 0);  // finished: not started
  auto rerun = ledger.start_attempt("k", sha, 1, 1003, false, false, /*rerun_ok=*/true);
  REQUIRE(rerun.has_value());
  CHECK(rerun->n == 2);
  CHECK(rerun->state == TaskState::kPending);
  REQUIRE(ledger.commit().is_ok());
}

TEST_CASE("results: kept in the caller's transaction, a running total, the oldest evicted over the limit") {
  Env env;
  auto results = ResultStore::open(env.db());
  REQUIRE_MESSAGE(results.has_value(), results.error());
  Ledger& ledger = *env.ledger;
  std::vector<std::int64_t> ids;
  REQUIRE(ledger.begin().is_ok());
  for (int i = 0; i < 4; ++i) {
    auto t = ledger.start_attempt("k" + std::to_string(i), sha256_hex(std::to_string(i)), 1, 1000 + i);
    REQUIRE(t.has_value());
    ids.push_back(t->task_id);
    // Results are those of ok tasks: a task that is not ok has none to give.
    REQUIRE(ledger.set_state(t->task_id, TaskState::kOk, 1000 + i).is_ok());
    REQUIRE(results->keep(t->task_id, std::string(30, static_cast<char>('a' + i)), 100, 2000 + i).is_ok());
  }
  CHECK(*results->kept_bytes() == 120);
  auto evicted = results->evict_over(100);
  REQUIRE(evicted.has_value());
  CHECK(*evicted == 1);
  REQUIRE(ledger.commit().is_ok());
  CHECK(*results->kept_bytes() == 90);
  auto oldest = results->of_task(ids[0]);
  REQUIRE(oldest.has_value());
  REQUIRE(oldest->has_value());
  CHECK((*oldest)->status == ResultStatus::kEvicted);
  CHECK((*oldest)->data.empty());
  auto newest = results->of_task(ids[3]);
  REQUIRE(newest.has_value());
  CHECK((*newest)->data == std::string(30, 'd'));
  // Too large for the limit: a row that says so, nothing kept, the total unchanged.
  REQUIRE(ledger.begin().is_ok());
  REQUIRE(results->keep(ids[0], std::string(101, 'x'), 100, 3000).is_ok());
  REQUIRE(ledger.commit().is_ok());
  CHECK((*results->of_task(ids[0]))->status == ResultStatus::kTooLarge);
  CHECK(*results->kept_bytes() == 90);
  CHECK(env.count("SELECT coalesce(sum(size), 0) FROM results WHERE status = 'kept'") == 90);
  // A task deleted (quarantine purge) takes its result, and its bytes, with it.
  REQUIRE(env.db().exec("DELETE FROM tasks WHERE id = " + std::to_string(ids[3])).is_ok());
  CHECK(*results->kept_bytes() == 60);
}

}  // namespace

// A store with a payload kept inline and one kept in a file.
struct InlineAndFile {
  Env env;
  const std::string small = bytes_of(1000, 3);
  const std::string big = bytes_of(kInlinePayloadBytes + 5000, 9);
  InlineAndFile() {
    env.add("small", small, "fp-s", 1000);
    env.add("big", big, "fp-b", 1000);
  }
};

TEST_CASE("quarantine store: a payload's head is its first bytes, inline or in a file, read without the rest") {
  InlineAndFile stored;
  Env& env = stored.env;
  const std::string& small = stored.small;
  const std::string& big = stored.big;
  auto& payloads = env.qs->payloads();
  CHECK(payloads.head(sha256_hex(small), 10).value() == small.substr(0, 10));
  CHECK(payloads.head(sha256_hex(small), 5000).value() == small);  // shorter than asked: all of it
  CHECK(payloads.head(sha256_hex(big), 4099).value() == big.substr(0, 4099));
  CHECK(payloads.head(sha256_hex(big), big.size() + 1).value() == big);
  CHECK_FALSE(payloads.head(sha256_hex("never stored"), 10).has_value());
  // The file replaced by a symlink: refused, not followed.
  const std::string path = env.payload_path(sha256_hex(big));
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::symlink("/etc/passwd", path.c_str()) == 0);
  auto followed = payloads.head(sha256_hex(big), 10);
  REQUIRE_FALSE(followed.has_value());
  CHECK(followed.error().find("cannot read payload") != std::string::npos);
}

TEST_CASE("quarantine store: a found payload is read after its name is gone; a damaged one is refused then") {
  InlineAndFile stored;
  auto& payloads = stored.env.qs->payloads();
  auto inline_found = payloads.find(sha256_hex(stored.small));
  REQUIRE(inline_found.has_value());
  CHECK_FALSE(inline_found->file.valid());
  CHECK(PayloadStore::read_checked(*inline_found).value() == stored.small);
  // The file open, then unlinked (a purge): its bytes are still read.
  auto found = payloads.find(sha256_hex(stored.big));
  REQUIRE(found.has_value());
  CHECK(found->file.valid());
  CHECK(PayloadStore::check_file(*found).value() == stored.big.size());  // read through, not held
  REQUIRE(::unlink(stored.env.payload_path(sha256_hex(stored.big)).c_str()) == 0);
  CHECK(PayloadStore::read_checked(*found).value() == stored.big);
  CHECK_FALSE(payloads.find(sha256_hex(stored.big)).has_value());  // gone for the next reader
  CHECK_FALSE(payloads.find(sha256_hex("never stored")).has_value());
  // Damaged inline bytes: found, refused when read.
  const std::string sha = sha256_hex(stored.small);
  REQUIRE(stored.env.db().exec("UPDATE payloads SET data = x'00' WHERE sha256 = '" + sha + "'").is_ok());
  auto damaged = payloads.find(sha256_hex(stored.small));
  REQUIRE(damaged.has_value());
  auto read = PayloadStore::read_checked(*damaged);
  REQUIRE_FALSE(read.has_value());
  CHECK(read.error().find("damaged") != std::string::npos);
}

TEST_CASE("quarantine stats: records by UTC day, the last 14 days, today last; the edges of a day; filters apply") {
  Env env;
  const std::int64_t today = 20000 * kDayMs;  // 2024-10-04T00:00:00Z
  const std::int64_t now = today + 10 * 3600 * 1000;
  const std::int64_t first = today - 13 * kDayMs;
  const std::int64_t midnight = env.add("at-midnight", "p1", "fp-1", today).id;  // today's first millisecond
  env.add("last-ms-yesterday", "p2", "fp-1", today - 1);
  env.add("first-day", "p3", "fp-1", first);
  env.add("fifteenth-day", "p4", "fp-1", first - 1);    // before the series
  env.add("tomorrow", "p5", "fp-1", today + kDayMs);    // a clock ahead: after it
  env.add("other", "p6", "fp-2", today + 5 * 3600 * 1000);
  auto groups = env.qs->stats(ListFilter{}, now);
  REQUIRE(groups.has_value());
  REQUIRE(groups->size() == 2);
  const FingerprintStats& one = (*groups)[0];
  CHECK(one.fingerprint == "fp-1");
  CHECK(one.records == 5);
  CHECK(one.first_day_ms == first);
  std::vector<std::int64_t> want(kStatsDays, 0);
  want[0] = 1;
  want[12] = 1;
  want[13] = 1;
  CHECK(one.by_day == want);
  std::vector<std::int64_t> other(kStatsDays, 0);
  other[13] = 1;
  CHECK((*groups)[1].by_day == other);
  // At the last millisecond of today, the same days; a millisecond later,
  // every record moves one day back and the first day's drops out.
  CHECK(env.qs->stats(ListFilter{}, today + kDayMs - 1).value()[0].by_day == want);
  auto tomorrow = env.qs->stats(ListFilter{}, today + kDayMs);
  REQUIRE(tomorrow.has_value());
  std::vector<std::int64_t> shifted(kStatsDays, 0);
  shifted[11] = 1;
  shifted[12] = 1;
  shifted[13] = 1;  // the record made "tomorrow" is today now
  CHECK((*tomorrow)[0].by_day == shifted);
  // The filters select the records counted.
  env.set_status(midnight, "resolved");
  ListFilter open;
  open.status = RecordStatus::kQuarantined;
  auto quarantined = env.qs->stats(open, now);
  REQUIRE(quarantined.has_value());
  want[13] = 0;
  CHECK((*quarantined)[0].by_day == want);
}
