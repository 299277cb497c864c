// Installing pillbox (issue 14, point 2): `cmake --install BUILD --prefix P`
// gives a tree that runs tasks from anywhere with nothing but P/bin on PATH,
// wherever P is (a space in its path, inside a 0700 directory, moved after
// installing), and whose exported bundles reproduce with it. A pillbox binary
// copied away from its helpers says what is missing and what to do.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

namespace {

namespace fs = std::filesystem;

// A payload the regex handler overflows its stack on (samples/README.md).
const char* const kDeepPattern = "pattern=(a|b)*";
const std::string kDeepPayload = std::string(PILLBOX_SOURCE_DIR) + "/samples/regex-deep/poison-deep-recursion.txt";

// The real `cmake --install` of this build tree into `prefix`.
void install_into(const std::string& prefix) {
  const auto r = e2e::run_command(PILLBOX_CMAKE_COMMAND, {"--install", PILLBOX_BUILD_DIR, "--prefix", prefix});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
}

// `program args...` with the environment a fresh login shell would give a
// user of the installed tree: only PATH (and HOME), nothing of the test's,
// run from `cwd`. `env` itself does the chdir and finds `program` on PATH.
e2e::RunResult run_clean(const std::string& cwd, const std::string& path, const std::string& program,
                         const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> argv{"-i", "-C", cwd, "PATH=" + path, "HOME=" + cwd};
  argv.insert(argv.end(), extra_env.begin(), extra_env.end());
  argv.push_back(program);
  argv.insert(argv.end(), args.begin(), args.end());
  return e2e::run_command("/usr/bin/env", argv);
}

// The JSON lines of a run whose "--json" is not on the command line (a
// bundle's reproduce.sh passes it to pillbox itself).
std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::size_t at = 0;
  while (at < out.size()) {
    const std::size_t end = out.find('\n', at);
    const std::string line = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.empty()) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      REQUIRE_MESSAGE(!j.is_discarded(), "not JSON: " << line);
      lines.push_back(std::move(j));
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return lines;
}

std::string path_with(const std::string& prefix) { return prefix + "/bin:/usr/bin:/bin"; }

// Where `pillbox doctor` (its text form: `--json` is one pretty-printed
// object, which the runner would take for JSON lines) says it found the
// helper called `name`: "ok: PATH" or "NO: why".
std::string doctor_detail(const e2e::RunResult& doctor, const std::string& name) {
  std::size_t at = 0;
  while (at < doctor.out.size()) {
    const std::size_t end = doctor.out.find('\n', at);
    const std::string line = doctor.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    // "%-4s %-40s %s": the verdict, the check's name, the detail.
    if (line.size() > 46 && line.compare(5, name.size(), name) == 0 && line[5 + name.size()] == ' ') {
      return line.substr(0, 2) + ": " + line.substr(46);
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  FAIL("doctor has no '" << name << "' line: " << doctor.out);
  return {};
}

// The copies of the crash library pillbox keeps for tasks (as root, in
// /var/lib/pillbox: supervisor/exec/crash_library_copy.h), each with its mode.
std::map<std::string, fs::perms> crash_library_copies() {
  std::map<std::string, fs::perms> copies;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/var/lib/pillbox", ec)) {
    if (e.path().filename().string().rfind("libpillbox-crash-", 0) == 0) copies[e.path()] = e.symlink_status().permissions();
  }
  return copies;
}

// An exec program that crashes, run by the installed tree: with its crash
// report, so the crash library was preloaded, from where it is installed or
// from a copy pillbox made.
void check_exec_crash(const std::string& prefix, const std::string& work) {
  fs::copy_file(e2e::fixture("crash_sites"), work + "/crash_sites");
  fs::permissions(work + "/crash_sites", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                             fs::perms::others_read | fs::perms::others_exec);
  std::ofstream(work + "/a.txt") << "A";
  const auto run = run_clean(work, path_with(prefix), "pillbox",
                             {"run", "--no-store", "--max-attempts", "1", "--json", "a.txt", "--", work + "/crash_sites"});
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  CHECK(run.only_record()["kind"] == "crash");
  CHECK(run.only_record()["crash_state"] == nlohmann::json::array({"parse_header", "main"}));
}

// check_exec_crash where the tasks cannot preload the installed library
// itself: they load a copy, root's, 0444, that no other uid may change.
void check_exec_crash_from_copy(const std::string& prefix, const std::string& work) {
  if (!e2e::is_root()) {
    check_exec_crash(prefix, work);
    MESSAGE("without root the copy goes to ~/.cache/pillbox; not looked at here");
    return;
  }
  check_exec_crash(prefix, work);
  const auto copies = crash_library_copies();
  REQUIRE_FALSE(copies.empty());
  const std::string installed = e2e::read_file(prefix + "/lib/pillbox/libpillbox-crash.so");
  bool found = false;
  for (const auto& [path, perms] : copies) {
    if (e2e::read_file(path) != installed) continue;
    found = true;
    CHECK(perms == (fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(st.st_uid == 0);
  }
  CHECK_MESSAGE(found, "no copy of " << prefix << "/lib/pillbox/libpillbox-crash.so in /var/lib/pillbox");
}

void check_installed_tree(const std::string& prefix, const std::string& work) {
  const std::string path = path_with(prefix);
  const std::string canonical_prefix = fs::canonical(prefix).string();

  // doctor: every helper from the installed tree, and a task runs.
  const auto doctor = run_clean(work, path, "pillbox", {"doctor"});
  INFO(doctor.describe());
  CHECK(doctor.exit_code == 0);
  CHECK(doctor_detail(doctor, "sandbox binary") == "ok: " + canonical_prefix + "/libexec/pillbox/pillbox-sandbox");
  CHECK(doctor_detail(doctor, "crash library").starts_with("ok: " + canonical_prefix + "/lib"));
  CHECK(doctor_detail(doctor, "pdf-text module").starts_with("ok: " + canonical_prefix + "/lib"));

  // The pdf-text module, which the zygote loads from the installed tree.
  const auto pdf = run_clean(work, path, "pillbox",
                             {"run", "--no-store", "--max-attempts", "1", "--handler", "pdf-text", "--json",
                              std::string(PILLBOX_SOURCE_DIR) + "/samples/pdf/good-hello.pdf"});
  INFO(pdf.describe());
  CHECK(pdf.exit_code == 0);
  CHECK(pdf.only_record()["output"].get<std::string>().starts_with("Hello from pillbox"));

  fs::copy_file(kDeepPayload, work + "/deep.txt");
  const std::string store = work + "/store";
  const auto run = run_clean(work, path, "pillbox",
                             {"run", "--store", store, "--handler", "regex", "--arg", kDeepPattern, "--max-attempts",
                              "1", "--json", "deep.txt"});
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  const nlohmann::json& record = run.only_record();
  CHECK(record["kind"] == "stack-overflow");

  const auto listed = run_clean(work, path, "pillbox", {"quarantine", "list", "--store", store, "--json"});
  INFO(listed.describe());
  REQUIRE(listed.records.size() == 1);
  const std::string id = std::to_string(listed.records[0]["id"].get<std::int64_t>());
  const std::string bundle = work + "/the bundle";
  const auto exported = run_clean(work, path, "pillbox", {"quarantine", "export", id, "--bundle", "-o", bundle, "--store", store});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);

  // From another directory, by its path, with the installed pillbox on PATH.
  const auto again = run_clean(prefix, path, bundle + "/reproduce.sh", {});
  INFO(again.describe());
  const auto records = json_lines(again.out);
  REQUIRE(records.size() == 1);
  CHECK(records[0]["kind"] == "stack-overflow");
  CHECK(records[0]["fingerprint"] == listed.records[0]["fingerprint"]);
}

}  // namespace

TEST_CASE("an installed tree runs tasks and reproduces its bundles, with a space in its path and after moving") {
  e2e::TempDir root;
  const std::string staged = root.path() + "/staged";
  install_into(staged);
  // Relocatable: nothing of the prefix is compiled in.
  const std::string prefix = root.path() + "/moved here/usr local";
  fs::create_directories(root.path() + "/moved here");
  fs::rename(staged, prefix);
  const std::string work = root.path() + "/my work";
  fs::create_directory(work);
  check_installed_tree(prefix, work);
  // LD_PRELOAD cannot hold a space: tasks preload a copy, and crashes keep their reports.
  check_exec_crash_from_copy(prefix, work);
}

TEST_CASE("an installed tree inside a 0700 directory runs tasks and reproduces its bundles") {
  e2e::TempDir root(0700);
  const std::string prefix = root.path() + "/prefix";
  install_into(prefix);
  e2e::TempDir work;
  check_installed_tree(prefix, work.path());
  // Under /tmp, the zygote shows the crash library to the task's uid itself.
  check_exec_crash(prefix, work.path());
}

TEST_CASE("an exec run whose crash library its tasks' uid cannot read preloads a copy, and loses no crash report") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: tasks drop to another uid only when pillbox runs as root");
    return;
  }
  // A 0700 directory tasks would see as the host's (not under /tmp, whose
  // binds would show the library anyway), which their uid cannot enter: a
  // clone in /root, say.
  e2e::TempDir root(0700, e2e::host_dir_tasks_see());
  const std::string prefix = root.path() + "/prefix";
  install_into(prefix);
  e2e::TempDir work;
  check_exec_crash_from_copy(prefix, work.path());
}

TEST_CASE("a symlink to the installed pillbox finds the helpers of the tree it points into") {
  e2e::TempDir root;
  const std::string prefix = root.path() + "/prefix";
  install_into(prefix);
  fs::create_directory(root.path() + "/links");
  fs::create_symlink(prefix + "/bin/pillbox", root.path() + "/links/pillbox");
  const auto doctor = run_clean(root.path(), root.path() + "/links:/usr/bin:/bin", "pillbox", {"doctor"});
  INFO(doctor.describe());
  CHECK(doctor.exit_code == 0);
  CHECK(doctor_detail(doctor, "sandbox binary") == "ok: " + fs::canonical(prefix).string() + "/libexec/pillbox/pillbox-sandbox");
}

TEST_CASE("a pillbox binary copied alone names what it misses, where it looked and what to do, and touches nothing") {
  e2e::TempDir root;
  fs::create_directory(root.path() + "/bin");
  const std::string lone = root.path() + "/bin/pillbox";
  fs::copy_file(e2e::pillbox_binary(), lone);
  const std::string store = root.path() + "/store";
  const std::string input = root.path() + "/input.txt";
  fs::copy_file(kDeepPayload, input);

  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"run", "--store", store, "--handler", "echo", input},
        std::vector<std::string>{"reproduce", "1", "--store", store},
        std::vector<std::string>{"quarantine", "replay", "--store", store},
        std::vector<std::string>{"fuzz", "--store", store, "--handler", "echo", "--max-runs", "1"}}) {
    const auto r = run_clean(root.path(), path_with(root.path()), "pillbox", command);
    INFO(r.describe());
    CHECK(r.exit_code == 3);
    CHECK(r.err.find("cannot find the sandbox binary pillbox-sandbox") != std::string::npos);
    // Every place looked, and both ways out.
    CHECK(r.err.find(root.path() + "/bin/pillbox-sandbox") != std::string::npos);
    CHECK(r.err.find(root.path() + "/libexec/pillbox/pillbox-sandbox") != std::string::npos);
    CHECK(r.err.find("cmake --install") != std::string::npos);
    CHECK(r.err.find("build directory") != std::string::npos);
    CHECK(r.err.find("zygote") == std::string::npos);
    CHECK(r.err_lines().size() == 1);
    // Refused before anything was created.
    CHECK(!fs::exists(store));
  }

  // Help and commands that run no task still work.
  CHECK(run_clean(root.path(), path_with(root.path()), "pillbox", {"run", "--help"}).exit_code == 0);
  CHECK(run_clean(root.path(), path_with(root.path()), "pillbox", {"policy", "show", "strict"}).exit_code == 0);

  // doctor says the same on its line, and that no task can run.
  const auto doctor = run_clean(root.path(), path_with(root.path()), "pillbox", {"doctor"});
  INFO(doctor.describe());
  CHECK(doctor.exit_code == 3);
  const std::string line = doctor_detail(doctor, "sandbox binary");
  CHECK(line.starts_with("NO: cannot find the sandbox binary pillbox-sandbox"));
  CHECK(line.find("cmake --install") != std::string::npos);

  // An override that names nothing is reported as such.
  const auto wrong = run_clean(root.path(), path_with(root.path()), "pillbox", {"run", "--no-store", "--handler", "echo", input},
                               {"PILLBOX_SANDBOX=" + root.path() + "/nowhere"});
  INFO(wrong.describe());
  CHECK(wrong.exit_code == 3);
  CHECK(wrong.err.find("PILLBOX_SANDBOX names " + root.path() + "/nowhere, which is not there") != std::string::npos);
}

TEST_CASE("a bundle's reproduce.sh finds pillbox by $PILLBOX or PATH, and says what to do when there is none") {
  e2e::TempDir work;
  const std::string store = work.path() + "/store";
  const auto run = e2e::run_pillbox({"run", "--store", store, "--handler", "regex", "--arg", kDeepPattern, "--max-attempts",
                                     "1", "--json", kDeepPayload});
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  const std::string bundle = work.path() + "/bundle";
  const auto exported = e2e::run_pillbox({"quarantine", "export", "1", "--bundle", "-o", bundle, "--store", store});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  const std::string script = bundle + "/reproduce.sh";

  // No pillbox anywhere: a message that says what to do, not "not found".
  const auto none = run_clean(work.path(), "/usr/bin:/bin", script, {});
  INFO(none.describe());
  CHECK(none.exit_code == 127);
  CHECK(none.err.find("pillbox is not on PATH") != std::string::npos);
  CHECK(none.err.find("cmake --install") != std::string::npos);
  CHECK(none.err.find("PILLBOX=/path/to/pillbox") != std::string::npos);

  // $PILLBOX naming nothing usable: said so.
  const auto wrong = run_clean(work.path(), "/usr/bin:/bin", script, {}, {"PILLBOX=" + work.path() + "/nowhere"});
  CHECK(wrong.exit_code == 127);
  CHECK(wrong.err.find("PILLBOX=" + work.path() + "/nowhere is not an executable pillbox") != std::string::npos);
  const auto dir = run_clean(work.path(), "/usr/bin:/bin", script, {}, {"PILLBOX=" + work.path()});
  CHECK(dir.exit_code == 127);

  // The build tree's pillbox by $PILLBOX, absolute, and relative to where
  // the script is started (it changes directory after resolving it).
  const std::string relative = fs::relative(e2e::pillbox_binary(), work.path()).string();
  for (const std::string& pillbox : {e2e::pillbox_binary(), relative}) {
    const auto again = run_clean(work.path(), "/usr/bin:/bin", script, {}, {"PILLBOX=" + pillbox});
    INFO(again.describe());
    const auto records = json_lines(again.out);
    REQUIRE(records.size() == 1);
    CHECK(records[0]["kind"] == "stack-overflow");
  }
}

TEST_CASE("a record's text cannot add commands to its bundle's reproduce.sh") {
  // A store someone else could write to (or a fleet's Redis) may hold any
  // bytes in a record; they land in the script's comment lines.
  e2e::TempDir work;
  const std::string store = work.path() + "/store";
  const auto run = e2e::run_pillbox({"run", "--store", store, "--handler", "regex", "--arg", kDeepPattern, "--max-attempts",
                                     "1", "--json", kDeepPayload});
  REQUIRE(run.exit_code == 1);
  const std::string marker = work.path() + "/injected";
  e2e::sql_write(store + "/pillbox.db", "UPDATE quarantine SET fingerprint = fingerprint || char(10) || 'touch " + marker +
                                            "' || char(13) || 'touch " + marker + "'");
  const std::string bundle = work.path() + "/bundle";
  const auto exported = e2e::run_pillbox({"quarantine", "export", "1", "--bundle", "-o", bundle, "--store", store});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  const auto again = run_clean(work.path(), "/usr/bin:/bin", bundle + "/reproduce.sh", {}, {"PILLBOX=" + e2e::pillbox_binary()});
  INFO(again.describe());
  CHECK(json_lines(again.out).size() == 1);
  CHECK(!fs::exists(marker));
}
