// Paths pillbox does not own (issue 11, points 1 and 8): a result directory
// where someone planted links, and input trees holding FIFOs, devices and
// symlinks that lead out of the tree. pillbox runs as root here, so every
// link it followed would be a write or a read with root's rights.
//   --out: a planted symlink is replaced, never written through; results are
//     0600 unless --out-mode says otherwise; distinct keys get distinct files.
//   inputs: only regular files are read; anything else named on the command
//     line is exit 2 before anything runs; anything else inside a directory is
//     listed and makes the run exit 2; never a hang, never a silent skip.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <set>
#include <string>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;

namespace {

// A FIFO never has a writer here: a pillbox that opens one for reading and
// waits would hang until this deadline kills it (and fails the test).
constexpr int kNoHangDeadlineS = 60;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  REQUIRE_MESSAGE(::lstat(path.c_str(), &st) == 0, "no " << path);
  return st;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

void make_dir(const std::string& path) { REQUIRE_MESSAGE(::mkdir(path.c_str(), 0755) == 0, "cannot create " << path); }

void make_fifo(const std::string& path) { REQUIRE_MESSAGE(::mkfifo(path.c_str(), 0644) == 0, "cannot create " << path); }

void make_symlink(const std::string& target, const std::string& link) {
  REQUIRE_MESSAGE(::symlink(target.c_str(), link.c_str()) == 0, "cannot create " << link);
}

// A unix socket file at `path` (it stays when the socket is closed).
void make_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  path.copy(addr.sun_path, path.size());
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  ::close(fd);
  REQUIRE(bound == 0);
}

// The one stderr line that contains `part` ("" when none does).
std::string err_line_with(const e2e::RunResult& r, const std::string& part) {
  for (const auto& line : r.err_lines()) {
    if (contains(line, part)) return line;
  }
  return "";
}

}  // namespace

// ---- point 1: results never follow links ---------------------------------

TEST_CASE("--out: a symlink planted in DIR is replaced, its target is never written; results are 0600") {
  e2e::TempDir dir;
  const std::string out = dir.file("results");
  make_dir(out);
  const std::string victim = dir.write("victim", "VICTIM-UNCHANGED");
  make_symlink(victim, out + "/k.out");                         // to a file outside DIR
  make_symlink(dir.file("created-through-link"), out + "/n.out");  // dangling: fopen would create its target
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--no-store", "--out", out, "-"},
                             task_line("k", "written by pillbox") + task_line("n", "second result"));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(e2e::read_file(victim) == "VICTIM-UNCHANGED");
  CHECK_FALSE(exists(dir.file("created-through-link")));
  for (const auto& item : {std::pair<std::string, std::string>{"k", "written by pillbox"}, {"n", "second result"}}) {
    const auto& key = item.first;  // clang 14 cannot capture a structured binding
    const auto& bytes = item.second;
    CAPTURE(key);
    const std::string file = out + "/" + key + ".out";
    CHECK(r.record(key)["output_file"] == file);
    const struct stat st = lstat_of(file);
    CHECK(S_ISREG(st.st_mode));  // the link itself was replaced
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(e2e::read_file(file) == bytes);
  }
}

TEST_CASE("--out: distinct keys get distinct files, whatever the order; the names are the documented escapes") {
  e2e::TempDir dir;
  const std::string out = dir.file("results");
  const std::string long_a(300, 'x');
  const std::string long_b = std::string(300, 'x') + "y";  // the same first 200 bytes
  // key -> the file name README.md documents for it.
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"a/b", "a%2Fb.out"}, {"a_b", "a_b.out"}, {"a%2Fb", "a%252Fb.out"}, {"..", "...out"}, {"", ".out"},
      {"caf\xc3\xa9 1", "caf%C3%A9%201.out"}, {long_a, ""}, {long_b, ""}};
  std::string forward, backward;
  for (const auto& [key, name] : keys) {
    const std::string line = task_line(key, "result of " + key);
    forward += line;
    backward = line + backward;
  }
  std::map<std::string, std::string> first_names;
  for (const std::string* input : {&forward, &backward}) {
    const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--no-store", "--out", out, "-"}, *input);
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    REQUIRE(r.records.size() == keys.size());
    std::set<std::string> files;
    for (const auto& [key, name] : keys) {
      const std::string& task_key = key;  // clang 14 cannot capture a structured binding
      CAPTURE(task_key);
      const std::string path = r.record(key)["output_file"];
      REQUIRE(path.rfind(out + "/", 0) == 0);
      const std::string file_name = path.substr(out.size() + 1);
      if (!name.empty()) CHECK(file_name == name);
      CHECK(file_name.size() <= 255);
      CHECK(e2e::read_file(path) == "result of " + key);
      files.insert(file_name);
      // A rerun in another order writes each key's result to the same file.
      if (input == &forward) first_names[key] = file_name;
      else CHECK(first_names[key] == file_name);
    }
    CHECK(files.size() == keys.size());
  }
}

TEST_CASE("--out: a directory in the way of one result is an error for that result, the others are written") {
  e2e::TempDir dir;
  const std::string out = dir.file("results");
  make_dir(out);
  make_dir(out + "/d.out");
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--no-store", "--out", out, "-"},
                             task_line("d", "blocked") + task_line("e", "fine"));
  INFO(r.describe());
  CHECK(r.term_signal == 0);
  CHECK(r.exit_code == 2);
  const std::string line = err_line_with(r, out + "/d.out");
  CHECK_MESSAGE(contains(line, "Is a directory"), line);
  CHECK(S_ISDIR(lstat_of(out + "/d.out").st_mode));
  CHECK(e2e::read_file(out + "/e.out") == "fine");
}

TEST_CASE("--out-mode: results get exactly the mode asked for") {
  e2e::TempDir dir;
  const std::string out = dir.file("results");
  const auto r = run_pillbox({"run", "--handler", "echo", "--no-store", "--out", out, "--out-mode", "0644", "-"},
                             task_line("shared", "for everyone"));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK((lstat_of(out + "/shared.out").st_mode & 07777) == 0644);
  const auto bad = run_pillbox({"run", "--handler", "echo", "--no-store", "--out", out, "--out-mode", "4755", "-"},
                               task_line("x", "x"));
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "--out-mode"));
}

TEST_CASE("quarantine replay --out: a planted symlink is replaced, its target is never written") {
  e2e::TempDir dir;
  const std::string store = dir.file("store");
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1",
                                "--no-breaker", "-"},
                               task_line("r", "S crashes until fixed"));
  INFO(run.describe());
  REQUIRE(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 1);
  const std::string out = dir.file("results");
  make_dir(out);
  const std::string victim = dir.write("victim", "VICTIM-UNCHANGED");
  make_symlink(victim, out + "/r.out");
  const auto replay = run_pillbox({"quarantine", "replay", "--all", "--handler", e2e::poison_plugin(), "--arg", "fixed=yes",
                                   "--out", out, "--store", store});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(e2e::read_file(victim) == "VICTIM-UNCHANGED");
  const struct stat st = lstat_of(out + "/r.out");
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(e2e::read_file(out + "/r.out") == "S crashes until fixed");
}

// ---- point 8: inputs are regular files -----------------------------------

TEST_CASE("a FIFO named on the command line: exit 2 before anything runs, no hang") {
  e2e::TempDir dir;
  const std::string good = dir.write("good", "GOOD");
  const std::string fifo = dir.file("fifo");
  make_fifo(fifo);
  const auto r = run_pillbox({"run", "--handler", "echo", "--no-store", good, fifo}, "", {}, {}, kNoHangDeadlineS);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());  // nothing ran, not even the good input
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "pillbox run: input '" + fifo + "' is a FIFO, not a regular file (inputs are regular files, "
                    "directories, or - for JSON lines on stdin)");
}

TEST_CASE("/dev/zero named on the command line: exit 2 before anything runs, nothing read") {
  e2e::TempDir dir;
  const std::string good = dir.write("good", "GOOD");
  const auto r = run_pillbox({"run", "--handler", "echo", "--no-store", good, "/dev/zero"}, "", {}, {}, kNoHangDeadlineS);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "pillbox run: input '/dev/zero' is a character device, not a regular file (inputs are regular "
                    "files, directories, or - for JSON lines on stdin)");
}

namespace {

// inputs/ with one good file and everything that is not one: a FIFO, a
// socket, a symlink to a secret outside the tree, a symlink to a device, a
// dangling symlink, and a symlink back up the tree (a loop when followed).
struct HostileTree {
  e2e::TempDir dir;
  std::string inputs = dir.file("inputs");
  std::string secret = dir.write("secret", "SECRET-OUTSIDE");
  HostileTree() {
    make_dir(inputs);
    make_dir(inputs + "/sub");
    dir.write("inputs/good.txt", "GOOD");
    dir.write("inputs/sub/deep.txt", "DEEP");
    make_fifo(inputs + "/fifo");
    make_fifo(inputs + "/sub/fifo");
    make_socket(inputs + "/sock");
    make_symlink(secret, inputs + "/s");
    make_symlink("/dev/zero", inputs + "/zero");
    make_symlink(dir.file("nothing-here"), inputs + "/dangling");
    make_symlink("..", inputs + "/sub/up");
  }
};

}  // namespace

TEST_CASE("inside a directory: only regular files are read; every other entry is listed and the run exits 2") {
  HostileTree tree;
  const std::string& in = tree.inputs;
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--no-store", in}, "", {}, {}, kNoHangDeadlineS);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  REQUIRE(r.records.size() == 2);
  CHECK(r.record(in + "/good.txt")["output"] == "GOOD");
  CHECK(r.record(in + "/sub/deep.txt")["output"] == "DEEP");
  CHECK_FALSE(contains(r.out, "SECRET-OUTSIDE"));
  const std::string not_followed = "a symlink, not followed (--follow-symlinks reads what it points to)";
  for (const auto& [entry, what] : std::vector<std::pair<std::string, std::string>>{
           {"fifo", "a FIFO, not a regular file"},
           {"sub/fifo", "a FIFO, not a regular file"},
           {"sock", "a socket, not a regular file"},
           {"s", not_followed},
           {"zero", not_followed},
           {"dangling", not_followed},
           {"sub/up", not_followed}}) {
    const std::string& tree_entry = entry;  // clang 14 cannot capture a structured binding
    CAPTURE(tree_entry);
    CHECK(err_line_with(r, "'" + in + "/" + entry + "'") == "pillbox run: skipped input '" + in + "/" + entry + "': " + what);
  }
  CHECK(contains(r.err, "7 input error(s)"));
}

TEST_CASE("--follow-symlinks: links to regular files are read, anything else is still listed, a loop ends") {
  HostileTree tree;
  const std::string& in = tree.inputs;
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--no-store", "--follow-symlinks", in}, "", {}, {},
                             kNoHangDeadlineS);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  REQUIRE(r.records.size() == 3);
  CHECK(r.record(in + "/good.txt")["output"] == "GOOD");
  CHECK(r.record(in + "/sub/deep.txt")["output"] == "DEEP");
  CHECK(r.record(in + "/s")["output"] == "SECRET-OUTSIDE");  // asked for
  for (const auto& [entry, what] : std::vector<std::pair<std::string, std::string>>{
           {"fifo", "a FIFO, not a regular file"},
           {"sock", "a socket, not a regular file"},
           {"zero", "a character device, not a regular file"},
           {"dangling", "a symlink to nothing"},
           {"sub/up", "a directory already read as '" + in + "'"}}) {
    const std::string& tree_entry = entry;  // clang 14 cannot capture a structured binding
    CAPTURE(tree_entry);
    CHECK(err_line_with(r, "'" + in + "/" + entry + "'") == "pillbox run: skipped input '" + in + "/" + entry + "': " + what);
  }
}

// Issue 25: reading the run's own store as input opens and closes a
// descriptor of pillbox.db, which drops the run's SQLite locks on it (the
// next reader then deletes the WAL under the run). Its files are never
// inputs, however they are reached.
TEST_CASE("the run's own store is never an input: named, below a named directory, or through a followed symlink") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  dir.write("a.txt", "A");
  const auto first = run_pillbox({"run", "--json", "--handler", "echo", "--store", store, dir.file("a.txt")});
  REQUIRE(first.exit_code == 0);
  make_symlink(store + "/pillbox.db", dir.file("db-link"));

  const auto named = run_pillbox({"run", "--handler", "echo", "--store", store, store});
  CHECK(named.exit_code == 2);
  CHECK(err_line_with(named, "'" + store + "'") == "pillbox run: input '" + store + "' is the pillbox store " + store +
                                                      ", never read as input (copy what you need out of it first)");
  const auto db = run_pillbox({"run", "--handler", "echo", "--store", store, store + "/pillbox.db"});
  CHECK(db.exit_code == 2);
  CHECK(contains(db.err, "is the pillbox store " + store + " (its pillbox.db), never read as input"));

  const auto below = run_pillbox({"run", "--json", "--handler", "echo", "--store", store, "--rerun", "--follow-symlinks",
                                  dir.path()});
  INFO(below.describe());
  CHECK(below.exit_code == 2);
  REQUIRE(below.records.size() == 1);
  CHECK(below.record(dir.file("a.txt"))["output"] == "A");
  CHECK(err_line_with(below, "'" + store + "'") == "pillbox run: skipped input '" + store + "': the pillbox store " +
                                                      store + ", never read as input");
  CHECK(err_line_with(below, "db-link") == "pillbox run: skipped input '" + dir.file("db-link") +
                                               "': the pillbox store " + store + " (its pillbox.db), never read as input");
  CHECK(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM tasks") == 1);
}

TEST_CASE("a symlink named on the command line is followed: the user chose it") {
  e2e::TempDir dir;
  const std::string target = dir.write("target", "NAMED");
  const std::string link = dir.file("link");
  make_symlink(target, link);
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--no-store", link});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.record(link)["output"] == "NAMED");
}

TEST_CASE("pillbox fuzz: a FIFO among the seeds is an error before fuzzing starts, not a hang or a silent skip") {
  e2e::TempDir dir;
  make_dir(dir.file("seeds"));
  dir.write("seeds/aaaa", "aaaa");
  make_fifo(dir.file("seeds/fifo"));
  const auto r = run_pillbox({"fuzz", dir.file("seeds"), "--handler", "echo", "--max-runs", "5", "--store", dir.file("store")},
                             "", {}, {}, kNoHangDeadlineS);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK(err_line_with(r, "fifo") == "pillbox fuzz: skipped input '" + dir.file("seeds/fifo") + "': a FIFO, not a regular file");
}

TEST_CASE("quarantine import: a symlink in an artifact directory is not followed, and it is reported") {
  e2e::TempDir dir;
  make_dir(dir.file("artifacts"));
  const std::string secret = dir.write("secret", "S SECRET-OUTSIDE");  // would crash the poison plugin if read
  const std::string link = dir.file("artifacts/crash-" + std::string(40, 'c'));
  make_symlink(secret, link);
  make_fifo(dir.file("artifacts/crash-" + std::string(40, 'f')));
  const auto r = run_pillbox({"quarantine", "import", dir.file("artifacts"), "--handler", e2e::poison_plugin(), "--json",
                              "--store", dir.file("store")},
                             "", {}, {}, kNoHangDeadlineS);
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // unreadable artifacts
  REQUIRE(r.records.size() == 2);
  for (const auto& rec : r.records) {
    CHECK(rec["status"] == "unreadable");
    CHECK_FALSE(rec.contains("record"));
  }
  CHECK(e2e::sql_int(dir.file("store") + "/pillbox.db", "SELECT count(*) FROM quarantine") == 0);
}
