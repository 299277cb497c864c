// The operator's view of the quarantine (issue 4): list with filters and
// paging, show, stats grouped by fingerprint, export byte for byte (and as a
// bundle that reproduces), discard with a reason, and clear errors that
// change nothing.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "shared/base64.h"
#include "shared/sha256.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

// Runs `input` through the poison plugin into `store` (retries on, breaker on,
// as an operator would run it) and returns the result.
e2e::RunResult quarantine_into(const std::string& store, const std::string& input) {
  return run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--jobs", "2", "--json", "--backoff-base", "5ms", "-"},
                     input);
}

// 20 poison payloads over 3 fingerprints (8 SIGSEGV, 7 SIGABRT, 5 rejected),
// interleaved with good ones.
struct Corpus {
  std::string input;
  std::map<std::string, std::set<std::string>> keys_by_group;  // "S", "A", "X"
};

Corpus twenty_poison() {
  Corpus c;
  const std::pair<const char*, int> groups[] = {{"S", 8}, {"A", 7}, {"X", 5}};
  int n = 0;
  for (int round = 0; round < 8; ++round) {
    for (const auto& [letter, count] : groups) {
      if (round >= count) continue;
      const std::string key = std::string("poison-") + letter + "-" + std::to_string(round);
      c.input += task_line(key, std::string(letter) + " payload " + std::to_string(round));
      c.keys_by_group[letter].insert(key);
      c.input += task_line("good-" + std::to_string(n), "fine " + std::to_string(n));
      ++n;
    }
  }
  return c;
}

// What the store holds, to show that a refused command changed nothing.
std::vector<std::vector<std::string>> snapshot(const std::string& db) {
  auto rows = sql_rows(db, "SELECT id, status, updated_at, reproduce_runs FROM quarantine ORDER BY id");
  for (auto& r : sql_rows(db, "SELECT count(*), coalesce(max(id), 0) FROM audit")) rows.push_back(r);
  for (auto& r : sql_rows(db, "PRAGMA user_version")) rows.push_back(r);
  return rows;
}

}  // namespace

TEST_CASE("quarantine stats groups 20 records by fingerprint; list filters, pages and shows them") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const Corpus corpus = twenty_poison();
  const auto run = quarantine_into(store, corpus.input);
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 20);

  const auto stats = run_pillbox({"quarantine", "stats", "--store", store, "--json"});
  INFO(stats.describe());
  REQUIRE(stats.exit_code == 0);
  REQUIRE(stats.records.size() == 3);
  // Most records first: 8 SIGSEGV, 7 SIGABRT, 5 rejections.
  CHECK(stats.records[0]["records"] == 8);
  CHECK(stats.records[0]["kind"] == "crash");
  CHECK(stats.records[1]["records"] == 7);
  CHECK(stats.records[1]["kind"] == "crash");
  CHECK(stats.records[2]["records"] == 5);
  CHECK(stats.records[2]["kind"] == "handler-error");
  std::set<std::string> fingerprints;
  for (const auto& g : stats.records) {
    fingerprints.insert(g["fingerprint"].get<std::string>());
    CHECK(g["open"] == g["records"]);
    CHECK(g["first_seen"].get<std::string>() <= g["last_seen"].get<std::string>());
  }
  CHECK(fingerprints.size() == 3);
  const auto table = run_pillbox({"quarantine", "stats", "--store", store});
  CHECK(table.exit_code == 0);
  CHECK(table.err.find("20 records in 3 groups") != std::string::npos);

  // list --fingerprint returns exactly the group, newest first.
  const char* letters[] = {"S", "A", "X"};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string fp = stats.records[i]["fingerprint"];
    const auto listed = run_pillbox({"quarantine", "list", "--store", store, "--fingerprint", fp, "--json"});
    INFO(listed.describe());
    REQUIRE(listed.exit_code == 0);
    std::set<std::string> keys;
    std::string previous = "9999";
    for (const auto& r : listed.records) {
      keys.insert(r["key"].get<std::string>());
      CHECK(r["fingerprint"] == fp);
      CHECK(r["created_at"].get<std::string>() <= previous);
      previous = r["created_at"].get<std::string>();
    }
    CHECK(keys == corpus.keys_by_group.at(letters[i]));
  }

  // --key, --since, --kind, paging.
  const auto one = run_pillbox({"quarantine", "list", "--store", store, "--key", "poison-A-3", "--json"});
  REQUIRE(one.records.size() == 1);
  CHECK(one.records[0]["key"] == "poison-A-3");
  CHECK(run_pillbox({"quarantine", "list", "--store", store, "--since", "1h", "--json"}).records.size() == 20);
  CHECK(run_pillbox({"quarantine", "list", "--store", store, "--since", "2099-01-01", "--json"}).records.empty());
  CHECK(run_pillbox({"quarantine", "list", "--store", store, "--kind", "handler-error", "--json"}).records.size() == 5);
  const auto all = run_pillbox({"quarantine", "list", "--store", store, "--json"});
  const auto page = run_pillbox({"quarantine", "list", "--store", store, "--json", "--limit", "5", "--offset", "5"});
  REQUIRE(all.records.size() == 20);
  REQUIRE(page.records.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(page.records[i]["id"] == all.records[5 + i]["id"]);
  const auto page_table = run_pillbox({"quarantine", "list", "--store", store, "--limit", "5", "--offset", "5"});
  CHECK(page_table.err.find("5 records shown (from 6) of 20") != std::string::npos);

  // show: the whole record, with its attempts and audit trail.
  const std::int64_t id = one.records[0]["id"];
  const auto shown = run_pillbox({"quarantine", "show", std::to_string(id), "--store", store, "--json"});
  INFO(shown.describe());
  REQUIRE(shown.records.size() == 1);
  const auto& r = shown.records[0];
  CHECK(r["key"] == "poison-A-3");
  CHECK(r["signal"] == "SIGABRT");
  REQUIRE(r["attempt_history"].size() == 2);
  CHECK(r["attempt_history"][0]["kind"] == "crash");
  CHECK(r["attempt_history"][1]["fingerprint"] == r["fingerprint"]);
  REQUIRE(r["audit"].size() == 1);
  CHECK(r["audit"][0]["action"] == "quarantined");
  CHECK(pillbox::base64_encode("A payload 3") == r["payload_head_b64"]);
  CHECK(r["policy"].get<std::string>().find("[limits]") != std::string::npos);
  const auto text = run_pillbox({"quarantine", "show", std::to_string(id), "--store", store});
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("crash (SIGABRT)") != std::string::npos);
  CHECK(text.out.find("attempts (2)") != std::string::npos);
  CHECK(text.out.find("| A payload 3") != std::string::npos);
}

TEST_CASE("quarantine show previews a hostile payload without a single control byte on the terminal") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  // ESC sequences that would clear the screen and set the window title, a
  // C1 CSI, a bell, and a NUL.
  const std::string payload = std::string("S\x1b[2J\x1b]0;owned\x07") + "\xc2\x9b" + "31m" + std::string(1, '\0') + "end";
  const std::string key = std::string("key\x1b[31m-red");
  REQUIRE(quarantine_into(store, task_line(key, payload)).exit_code == 1);
  for (const char* verb : {"show", "list"}) {
    std::vector<std::string> args = {"quarantine", verb, "--store", store};
    if (std::string(verb) == "show") args.insert(args.begin() + 2, "1");
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    for (const char c : r.out) {
      const auto u = static_cast<unsigned char>(c);
      CHECK_MESSAGE((u >= 0x20 || c == '\n'), "control byte " << int(u) << " in `quarantine " << verb << "` output");
    }
    CHECK(r.out.find("\xc2\x9b") == std::string::npos);
  }
  const auto shown = run_pillbox({"quarantine", "show", "1", "--store", store});
  CHECK(shown.out.find("53 1b 5b 32 4a") != std::string::npos);  // the bytes, as a hex dump
}

TEST_CASE("quarantine export writes byte-identical payloads: text, binary and multi-megabyte; a bundle reproduces") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  std::string binary = "S";
  for (int i = 0; i < 256; ++i) binary += static_cast<char>(i);
  std::string big = "S";
  std::mt19937 rng(7);
  big.reserve(3 * 1024 * 1024 + 1);
  while (big.size() < 3 * 1024 * 1024) big += static_cast<char>(rng() & 0xff);
  const std::map<std::string, std::string> payloads = {
      {"text", "S a plain text record\nwith two lines\n"}, {"binary", binary}, {"big", big}};
  std::string input;
  for (const auto& [key, bytes] : payloads) input += task_line(key, bytes);
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--jobs", "2", "--json",
                                "--backoff-base", "5ms", "--memory", "512M", "-"},
                               input);
  INFO(run.describe());
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 3);

  for (const auto& [key, bytes] : payloads) {
    const auto listed = run_pillbox({"quarantine", "list", "--store", store, "--key", key, "--json"});
    REQUIRE(listed.records.size() == 1);
    const std::string id = std::to_string(listed.records[0]["id"].get<std::int64_t>());
    CHECK(listed.records[0]["payload_sha256"] == pillbox::sha256_hex(bytes));
    const std::string file = dir.path() + "/" + key + ".bin";
    const auto exported = run_pillbox({"quarantine", "export", id, "-o", file, "--store", store});
    INFO(exported.describe());
    REQUIRE(exported.exit_code == 0);
    const std::string back = e2e::read_file(file);
    CHECK(back.size() == bytes.size());
    CHECK(pillbox::sha256_hex(back) == pillbox::sha256_hex(bytes));
    struct stat st {};
    REQUIRE(::stat(file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    // To a pipe, the same bytes.
    const auto piped = run_pillbox({"quarantine", "export", id, "-o", "-", "--store", store});
    CHECK(pillbox::sha256_hex(piped.out) == pillbox::sha256_hex(bytes));
    // An existing file is never overwritten without --force.
    const auto again = run_pillbox({"quarantine", "export", id, "-o", file, "--store", store});
    CHECK(again.exit_code == 2);
    CHECK(again.err.find("exists; give --force") != std::string::npos);
  }

  // The bundle: payload, policy, record and a script that runs it again the same way.
  const auto listed = run_pillbox({"quarantine", "list", "--store", store, "--key", "binary", "--json"});
  const std::string id = std::to_string(listed.records[0]["id"].get<std::int64_t>());
  const std::string bundle = dir.path() + "/bundle";
  const auto b = run_pillbox({"quarantine", "export", id, "-o", bundle, "--bundle", "--store", store});
  INFO(b.describe());
  REQUIRE(b.exit_code == 0);
  CHECK(pillbox::sha256_hex(e2e::read_file(bundle + "/payload")) == pillbox::sha256_hex(binary));
  const auto record = nlohmann::json::parse(e2e::read_file(bundle + "/record.json"));
  CHECK(record["fingerprint"] == listed.records[0]["fingerprint"]);
  CHECK(e2e::read_file(bundle + "/policy.policy") == record["policy"].get<std::string>());
  const std::string path = std::string(PILLBOX_BUILD_DIR) + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "");
  const auto again = e2e::run_command(bundle + "/reproduce.sh", {"--json"}, "", {{"PATH", path}});
  INFO(again.describe());
  REQUIRE(again.records.size() == 1);
  CHECK(again.records[0]["fingerprint"] == listed.records[0]["fingerprint"]);
  CHECK(again.records[0]["kind"] == "crash");
}

TEST_CASE("quarantine discard keeps the reason in the audit trail; a bad id changes nothing") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  REQUIRE(quarantine_into(store, task_line("one", "S 1") + task_line("two", "A 2") + task_line("three", "X 3")).exit_code == 1);
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 3);
  const auto before = snapshot(db);
  const auto bad = run_pillbox({"quarantine", "discard", "1", "99", "--reason", "known bug", "--store", store});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("no quarantine record 99") != std::string::npos);
  CHECK(snapshot(db) == before);  // record 1 was not discarded either
  CHECK(run_pillbox({"quarantine", "discard", "1", "--store", store}).exit_code == 2);  // no --reason

  const auto ok = run_pillbox({"quarantine", "discard", "1", "2", "--reason", "known bug #12, fixed upstream", "--store", store});
  INFO(ok.describe());
  CHECK(ok.exit_code == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == 2);
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'discarded' AND detail LIKE 'known bug #12, fixed upstream%'") == 2);
  const auto shown = run_pillbox({"quarantine", "show", "1", "--store", store, "--json"});
  REQUIRE(shown.records.size() == 1);
  CHECK(shown.records[0]["status"] == "discarded");
  CHECK(shown.records[0]["audit"].back()["action"] == "discarded");
  CHECK(shown.records[0]["audit"].back()["actor"].get<std::string>().find("via pillbox quarantine discard") != std::string::npos);
  // A discarded task stays done: the next run over the same input skips it.
  const auto rerun = quarantine_into(store, task_line("one", "S 1"));
  CHECK(rerun.exit_code == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 3);
}

TEST_CASE("bad input: unknown id, malformed duration or date, newer schema, no permission: clear error, nothing modified") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  REQUIRE(quarantine_into(store, task_line("one", "S 1")).exit_code == 1);
  const auto before = snapshot(db);

  struct Case {
    std::vector<std::string> args;
    int exit_code;
    const char* says;
  } cases[] = {
      {{"show", "42"}, 2, "no quarantine record 42"},
      {{"show", "abc"}, 2, "'abc' is not a record id"},
      {{"export", "42", "-o", dir.path() + "/x"}, 2, "no quarantine record 42"},
      {{"discard", "42", "--reason", "r"}, 2, "no quarantine record 42"},
      {{"purge", "--older-than", "3 weeks"}, 2, "--older-than"},
      {{"purge", "--older-than", "-1d"}, 2, "--older-than"},
      {{"list", "--since", "last tuesday"}, 2, "--since expects an age"},
      {{"list", "--status", "gone"}, 2, "unknown status 'gone'"},
      {{"list", "--kind", "meltdown"}, 2, "unknown kind 'meltdown'"},
      {{"list", "--limit", "ten"}, 2, "--limit expects a whole number"},
      {{"stats", "extra"}, 2, "unexpected argument 'extra'"},
      {{"frobnicate"}, 2, "unknown verb 'frobnicate'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"quarantine"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--store", store});
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == c.exit_code);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(r.out.empty());
  }
  CHECK(snapshot(db) == before);

  // A store that does not exist is not created by looking at it.
  const auto missing = run_pillbox({"quarantine", "list", "--store", dir.path() + "/nowhere"});
  CHECK(missing.exit_code == 3);
  CHECK(missing.err.find("no pillbox store at " + dir.path() + "/nowhere") != std::string::npos);
  CHECK(::access((dir.path() + "/nowhere").c_str(), F_OK) != 0);

  // A store written by a newer pillbox: refused, left as it is.
  e2e::sql_write(db, "PRAGMA user_version = 99");
  for (const char* verb : {"list", "stats"}) {
    const auto newer = run_pillbox({"quarantine", verb, "--store", store});
    CHECK(newer.exit_code == 3);
    CHECK(newer.err.find("newer than this pillbox understands") != std::string::npos);
  }
  const auto newer_discard = run_pillbox({"quarantine", "discard", "1", "--reason", "r", "--store", store});
  CHECK(newer_discard.exit_code == 3);
  CHECK(sql_int(db, "PRAGMA user_version") == 99);
  CHECK(sql_rows(db, "SELECT status FROM quarantine") == std::vector<std::vector<std::string>>{{"quarantined"}});
  e2e::sql_write(db, "PRAGMA user_version = " + before.back()[0]);

  // A store this user may not open: pillbox as nobody against root's 0700 store.
  if (!e2e::is_root()) {
    MESSAGE("skipped: no-permission case (needs root to run pillbox as another user)");
    return;
  }
  const auto denied = e2e::run_command("/usr/bin/setpriv", {"--reuid=65534", "--regid=65534", "--clear-groups",
                                                            e2e::pillbox_for_any_uid(), "quarantine", "list", "--store", store});
  INFO(denied.describe());
  CHECK(denied.exit_code == 3);
  CHECK(denied.err.find("Permission denied") != std::string::npos);
  CHECK(snapshot(db) == before);
}

// Issue 26, point 7: the date bug of a contact-export parser, one raise site
// reached through three callers, was three groups. They stay three groups
// (the frames-based rule), and stats, list --json and the console's data roll
// them up as one raise site, which list, replay and discard select as one.
TEST_CASE("one raise site through three callers: three groups, one rollup; list, replay and discard take it as one") {
  const char* const python = e2e::kPython3;
  if (!e2e::have_python3()) return;
  const e2e::Project p;
  const e2e::TempDir& project = p.dir;
  const std::string& parent = p.parent;
  const std::string& name = p.name;
  project.write("contacts.py", R"py(import sys


def parse_date(text):
    year, month, day = text.split("-")
    if not 1 <= int(month) <= 12:
        raise ValueError("month out of range: " + text)
    return text


def born(fields):
    return parse_date(fields[1])


def joined(fields):
    return parse_date(fields[2])


def renewed(fields):
    return parse_date(fields[3])


def main(path):
    for line in open(path):
        fields = line.rstrip("\n").split(",")
        if fields[0] == "empty":
            raise KeyError("no name")
        print(born(fields), joined(fields), renewed(fields))


main(sys.argv[1])
)py");
  REQUIRE(::mkdir(project.file("in").c_str(), 0755) == 0);
  const std::map<std::string, std::string> inputs = {
      {"a.csv", "ann,1990-13-01,2000-01-01,2010-01-01\n"},  // born -> parse_date
      {"b.csv", "bob,1990-01-01,2000-14-01,2010-01-01\n"},  // joined -> parse_date
      {"c.csv", "cy,1990-01-01,2000-01-01,2010-00-01\n"},   // renewed -> parse_date
      {"d.csv", "dee,1991-13-01,2001-01-01,2011-01-01\n"},  // born again
      {"e.csv", "empty,1990-01-01,2000-01-01,2010-01-01\n"},  // another raise site
      {"f.csv", "fay,1990-01-01,2000-01-01,2010-01-01\n"},  // ok
  };
  for (const auto& [file, text] : inputs) project.write("in/" + file, text);
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const auto run = e2e::pillbox_in(parent, {"run", "--store", store, "--max-attempts", "1", "--json", name + "/in", "--",
                                            python, name + "/contacts.py", "{}"});
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);

  const std::string site = "ValueError at parse_date (contacts.py)";
  const auto stats = run_pillbox({"quarantine", "stats", "--json", "--store", store});
  INFO(stats.describe());
  REQUIRE(stats.records.size() == 4);  // born, joined, renewed, and the KeyError
  std::set<std::string> at_site, site_ids;
  std::string key_error_site;
  for (const auto& g : stats.records) {
    if (g["raise_site"] == site) {
      at_site.insert(g["fingerprint"].get<std::string>());
      site_ids.insert(g["raise_site_id"].get<std::string>());
      CHECK(g["raise_site_groups"] == 3);
    } else {
      CHECK(g["raise_site"] == "KeyError at main (contacts.py)");
      CHECK(g["raise_site_groups"] == 1);
      key_error_site = g["raise_site_id"];
    }
  }
  CHECK(at_site.size() == 3);
  REQUIRE(site_ids.size() == 1);
  const std::string id = *site_ids.begin();
  const auto table = run_pillbox({"quarantine", "stats", "--store", store});
  INFO(table.describe());
  CHECK(table.out.find("same raise site (groups that differ only by their callers):\n  " + id + "  " + site +
                       "  3 groups, 4 records (4 open): ") != std::string::npos);
  CHECK(table.out.find("select one's records with --raise-site ID") != std::string::npos);
  CHECK(table.out.find("KeyError at main") == std::string::npos);  // one group: no rollup

  const auto listed = run_pillbox({"quarantine", "list", "--raise-site", id, "--json", "--store", store});
  INFO(listed.describe());
  CHECK(listed.records.size() == 4);
  // What is not an id is refused, an empty one first of all: it would
  // select every record without a site (found by the attack review).
  for (const std::string& bad : {std::string(), site, std::string("rs-0123")}) {
    for (const std::vector<std::string>& verb : {std::vector<std::string>{"list"}, {"stats"}, {"replay"},
                                                std::vector<std::string>{"discard", "--reason", "x"}}) {
      std::vector<std::string> args = {"quarantine"};
      args.insert(args.end(), verb.begin(), verb.end());
      args.insert(args.end(), {"--raise-site", bad, "--store", store});
      const auto refused = run_pillbox(args);
      CHECK(refused.exit_code == 2);
      CHECK(refused.err.find("--raise-site takes a raise site's id") != std::string::npos);
    }
  }

  // The bug fixed: one replay of the raise site resolves its 4 records, and
  // leaves the other one alone.
  std::string fixed = e2e::read_file(project.file("contacts.py"));
  const std::string bug = "        raise ValueError(\"month out of range: \" + text)\n";
  fixed.replace(fixed.find(bug), bug.size(), "        return \"as written: \" + text\n");
  project.write("contacts.py", fixed);
  const auto replay = e2e::pillbox_in("/", {"quarantine", "replay", "--raise-site", id, "--store", store});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'resolved'") == 4);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined' AND kind = 'handler-error'") == 1);

  // Discard by raise site: the open records of the KeyError's.
  const auto discard = run_pillbox({"quarantine", "discard", "--raise-site", key_error_site, "--reason",
                                    "empty rows are the exporter's bug", "--store", store});
  INFO(discard.describe());
  CHECK(discard.exit_code == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == 1);
  // Nothing open is left at the fixed site: said, and nothing changes.
  const auto again = run_pillbox({"quarantine", "discard", "--raise-site", id, "--reason", "x", "--store", store});
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("no open record is at raise site " + id) != std::string::npos);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'resolved'") == 4);
}

// Found by the attack review: two programs' `main` raising one exception
// type are two sites, and discarding one program's touches none of the other's.
TEST_CASE("the same exception in another program's main is another raise site") {
  const char* const python = e2e::kPython3;
  if (!e2e::have_python3()) return;
  e2e::TempDir dir(0755, e2e::host_dir_tasks_see());
  const std::string store = dir.path() + "/store";
  for (const std::string program : {"billing", "importer"}) {
    REQUIRE(::mkdir(dir.file(program).c_str(), 0755) == 0);
    dir.write(program + "/main.py", "import sys\n\n\ndef main(p):\n    open(p).read()\n    raise ValueError(p.split('/')[-1])\n\n\n"
                                    "main(sys.argv[1])\n");
    const std::string input = dir.write(program + "-in.txt", "x");
    const auto run = run_pillbox({"run", "--store", store, "--max-attempts", "1", input, "--", python,
                                  dir.file(program + "/main.py"), "{}"});
    CHECK(run.exit_code == 1);
  }
  const auto stats = run_pillbox({"quarantine", "stats", "--json", "--store", store});
  REQUIRE(stats.records.size() == 2);
  CHECK(stats.records[0]["raise_site"] == stats.records[1]["raise_site"]);
  CHECK(stats.records[0]["raise_site_id"] != stats.records[1]["raise_site_id"]);
  CHECK(stats.records[0]["raise_site_groups"] == 1);
  const auto discard = run_pillbox({"quarantine", "discard", "--raise-site", stats.records[0]["raise_site_id"],
                                    "--reason", "fixed in one program", "--store", store});
  CHECK(discard.exit_code == 0);
  CHECK(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == 1);
}
