// bench/quarantine_insert.cpp — quarantine insert rate, straight into the store.
//
// usage: quarantine_insert STORE_DIR RECORDS BATCH [FIRST]
//   Opens (creates) the store in STORE_DIR and inserts RECORDS quarantine
//   records, BATCH records per transaction (ledger.begin() ... commit()).
//   FIRST (default 0) numbers the keys, so that several calls can fill one store.
//   Prints one line:  records=N batch=B transactions=T seconds=S records_per_s=R
//
// Built and run by bench/quarantine_scale.sh (compiled into its temp dir,
// linked against BUILD_DIR's libpillbox_supervisor.a and libpillbox_shared.a).
// No sandbox: what is measured is the store, not a child.
//
// Each record is what `pillbox run` writes for a poison payload: the task and
// its attempt in the ledger (start_attempt, required by the record's foreign
// key), the record with the strict policy's text and a ~200-byte payload of
// its own (stored inline, keyed by its SHA-256), and its "quarantined" audit
// row. 50 distinct fingerprints, crash states like
// ["parse_header","read_block","main"], kind "crash" (SIGSEGV).
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "shared/policy_parser.h"
#include "shared/sha256.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/store.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "quarantine_insert: %s\n", what.c_str());
  return 1;
}

bool parse_count(const char* text, std::int64_t& out, std::int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < min) return false;
  out = v;
  return true;
}

// A distinct payload of about 200 bytes for record `i`.
std::string payload_for(std::int64_t i) {
  static const std::string filler =
      "\x7f" "ELF garbage header; length field says 0xffffffff; block table truncated at offset ";
  char head[64];
  std::snprintf(head, sizeof head, "payload %010lld: ", static_cast<long long>(i));
  std::string p = head;
  while (p.size() < 200) p += filler;
  p.resize(190 + static_cast<std::size_t>(i % 21));  // 190..210 bytes
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  // As the pillbox CLI does (supervisor/cli/main.cpp): keep freed heap
  // rather than trimming it after every statement.
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
  ::mallopt(M_TOP_PAD, 1 << 20);
  std::int64_t records = 0, batch = 0, first = 0;
  if (argc < 4 || argc > 5 || !parse_count(argv[2], records, 1) || !parse_count(argv[3], batch, 1) ||
      (argc == 5 && !parse_count(argv[4], first, 0))) {
    std::fprintf(stderr, "usage: quarantine_insert STORE_DIR RECORDS BATCH [FIRST]\n");
    return 2;
  }
  auto store = pillbox::store::Store::open(argv[1]);
  if (!store) return fail(store.error());
  auto ledger = pillbox::store::Ledger::open(store->db(), "bench-handler", "bench-policy");
  if (!ledger) return fail(ledger.error());
  auto quarantine = pillbox::store::QuarantineStore::open(store->db(), store->dir(), 0 /* no capacity limit */);
  if (!quarantine) return fail(quarantine.error());
  auto policy = pillbox::resolve_policy("strict");
  if (!policy) return fail(policy.error());

  // What does not change between records: as pillbox run fills it from its run identity.
  pillbox::store::QuarantineEntry base;
  base.source = "run";
  base.handler = "plugin:/opt/parsers/libparse.so";
  base.handler_identity = "bench-handler";
  base.handler_args = R"({"format":"blocks","strict":"yes"})";
  base.exec_argv = "[]";
  base.policy_identity = "bench-policy";
  base.policy = pillbox::format_policy(*policy);
  base.kind = "crash";
  base.signal = 11;
  base.exit_code = -1;

  static const char* const inner[] = {"parse_header", "read_block", "decode_varint", "inflate_chunk", "copy_name"};
  static const char* const middle[] = {"parse_body", "parse_table", "load_section", "walk_tree", "parse_entry",
                                       "next_token", "read_record", "scan_index", "load_dict", "read_frame"};

  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t transactions = 0;
  for (std::int64_t done = 0; done < records;) {
    if (auto s = ledger->begin(); !s) return fail(s.message());
    const std::int64_t end = std::min(records, done + batch);
    for (; done < end; ++done) {
      const std::int64_t i = first + done;
      const std::int64_t now = pillbox::store::now_ms();
      const std::string payload = payload_for(i);
      const std::string sha = pillbox::sha256_hex(payload);
      char key[48];
      std::snprintf(key, sizeof key, "corpus/input-%09lld.bin", static_cast<long long>(i));
      auto started = ledger->start_attempt(key, sha, static_cast<std::int64_t>(payload.size()), now);
      if (!started) return fail(started.error());

      const int fp = static_cast<int>(i % 50);
      char fingerprint[32];
      std::snprintf(fingerprint, sizeof fingerprint, "pb1-%016llx", static_cast<unsigned long long>((0x9e3779b97f4a7c15ULL * static_cast<unsigned>(fp + 1)) >> 1));
      pillbox::store::QuarantineEntry e = base;
      e.task_id = started->task_id;
      e.key = key;
      e.payload_sha256 = sha;
      e.payload_size = static_cast<std::int64_t>(payload.size());
      e.fingerprint = fingerprint;
      e.crash_state = {inner[fp % 5], middle[fp / 5], "main"};
      char message[96];
      std::snprintf(message, sizeof message, "SIGSEGV (address 0x%llx) in %s",
                    static_cast<unsigned long long>(0x1000 + 8 * (i % 4096)), inner[fp % 5]);
      e.message = message;
      e.cpu_ms = 3 + i % 7;
      e.wall_ms = 5 + i % 11;
      e.max_rss_kb = 2048 + i % 512;
      auto inserted = quarantine->insert(e, payload, now, "bench");
      if (!inserted) return fail(inserted.error());
      if (auto s = quarantine->audit(inserted->id, now, "bench", "quarantined", "crash (attempt 1)"); !s) {
        return fail(s.message());
      }
    }
    if (auto s = ledger->commit(); !s) return fail(s.message());
    ++transactions;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("records=%lld batch=%lld transactions=%lld seconds=%.3f records_per_s=%.0f\n",
              static_cast<long long>(records), static_cast<long long>(batch), static_cast<long long>(transactions),
              seconds, static_cast<double>(records) / seconds);
  return 0;
}
