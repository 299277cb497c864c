// One command-line grammar for every verb (issue 14, point 6): --help on
// every verb and sub-verb (and `pillbox help ...`), "did you mean" for
// commands, verbs and options, --store before the command, the short
// options, --json on every verb that prints, durations with decimals, and
// quarantine purge's --dry-run and its confirmation before deleting open
// records.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/io/shell_quote.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;
using e2e::task_line;
using Words = std::vector<std::string>;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every verb and sub-verb, as typed after `pillbox`.
const std::vector<Words> kVerbs = {
    {"run"},
    {"doctor"},
    {"policy"},
    {"policy", "check"},
    {"policy", "show"},
    {"quarantine"},
    {"quarantine", "list"},
    {"quarantine", "show"},
    {"quarantine", "stats"},
    {"quarantine", "export"},
    {"quarantine", "discard"},
    {"quarantine", "allow"},
    {"quarantine", "purge"},
    {"quarantine", "replay"},
    {"quarantine", "import"},
    {"reproduce"},
    {"minimize"},
    {"fuzz"},
    {"submit"},
    {"worker"},
    {"version"},
};

std::string joined(const Words& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

Words plus(Words a, const Words& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A store holding `n` open records (quarantined: the poison plugin's SIGSEGV).
void quarantine_into(const std::string& store, int n) {
  std::string input;
  for (int i = 0; i < n; ++i) input += task_line("poison-" + std::to_string(i), "S payload " + std::to_string(i));
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--backoff-base", "5ms",
                                "--json", "-"},
                               input);
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == n);
}

long long records(const std::string& store) { return sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine"); }

nlohmann::json one_json_document(const e2e::RunResult& r) {
  INFO(r.describe());
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  CHECK_FALSE(j.is_discarded());
  CHECK(j.is_object());
  return j;
}

struct TerminalRun {
  int exit_code = -1;
  std::string screen;  // everything pillbox wrote to the terminal, and the echo of what was typed
};

// Runs pillbox with a pseudo-terminal as its stdin, stdout and stderr, and
// `typed` typed into it: the operator at a terminal.
TerminalRun run_on_terminal(const Words& args, const std::string& typed) {
  TerminalRun result;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string slave_name = ::ptsname(master);
  std::vector<std::string> words = plus({e2e::pillbox_binary()}, args);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setsid();
    const int slave = ::open(slave_name.c_str(), O_RDWR);  // becomes the controlling terminal
    if (slave < 0) ::_exit(127);
    ::dup2(slave, 0);
    ::dup2(slave, 1);
    ::dup2(slave, 2);
    if (slave > 2) ::close(slave);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // Typed ahead: the terminal keeps the line until pillbox reads it.
  REQUIRE(::write(master, typed.data(), typed.size()) == static_cast<ssize_t>(typed.size()));
  char buf[4096];
  while (true) {  // until the last holder of the terminal's other end is gone (EIO)
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) {
      result.screen.append(buf, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  ::close(master);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace

TEST_CASE("every verb and sub-verb answers --help, -h and `pillbox help` with its own usage, exit 0") {
  for (const Words& verb : kVerbs) {
    const std::string name = joined(verb);
    INFO(name);
    const auto help = run_pillbox(plus(verb, {"--help"}));
    INFO(help.describe());
    CHECK(help.exit_code == 0);
    CHECK(help.err.empty());
    const bool own_usage = help.out.starts_with("usage: pillbox " + name + " ") ||
                           help.out.starts_with("usage: pillbox " + name + "\n");
    CHECK_MESSAGE(own_usage, help.out.substr(0, 120));
    const auto short_help = run_pillbox(plus(verb, {"-h"}));
    CHECK(short_help.exit_code == 0);
    CHECK(short_help.out == help.out);
    const auto help_verb = run_pillbox(plus({"help"}, verb));
    CHECK(help_verb.exit_code == 0);
    CHECK(help_verb.out == help.out);
  }
  // Each sub-verb its own: not the whole quarantine help.
  const auto show = run_pillbox({"quarantine", "show", "--help"});
  CHECK_FALSE(contains(show.out, "purge"));
  const auto top = run_pillbox({"help"});
  CHECK(top.exit_code == 0);
  CHECK(top.out.starts_with("usage: pillbox "));
}

TEST_CASE("--help anywhere in a verb's arguments shows its help and does nothing else") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  quarantine_into(store, 2);
  // A file named --help is not read as a policy: the help is shown.
  const auto check = run_pillbox({"policy", "check", "--help"});
  CHECK(check.exit_code == 0);
  CHECK(check.out.starts_with("usage: pillbox policy check"));
  for (const Words& args : {Words{"quarantine", "purge", "--older-than", "0s", "--yes", "--store", store, "--help"},
                            Words{"quarantine", "discard", "1", "--reason", "x", "--store", store, "-h"},
                            Words{"quarantine", "purge", "--bogus", "--help", "--store", store}}) {
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    CHECK(r.out.starts_with("usage: pillbox quarantine " + args[1]));
  }
  CHECK(records(store) == 2);
  CHECK(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == 0);
  const std::string fresh = dir.path() + "/fresh";
  const std::string input = dir.write("in", "hello");
  const auto run = run_pillbox({"run", "--store", fresh, "--handler", "echo", input, "--help"});
  CHECK(run.exit_code == 0);
  CHECK(::access(fresh.c_str(), F_OK) != 0);  // no store made, nothing ran
}

TEST_CASE("did you mean: an unknown command, verb or option names the nearest one") {
  const auto command = run_pillbox({"quarntine", "list"});
  CHECK(command.exit_code == 2);
  CHECK_MESSAGE(contains(command.err, "pillbox: unknown command 'quarntine'; did you mean 'quarantine'?"), command.err);
  const auto help_of = run_pillbox({"help", "reprodcue"});
  CHECK(help_of.exit_code == 2);
  CHECK_MESSAGE(contains(help_of.err, "did you mean 'reproduce'?"), help_of.err);
  const auto verb = run_pillbox({"quarantine", "lsit"});
  CHECK(verb.exit_code == 2);
  CHECK_MESSAGE(contains(verb.err, "unknown verb 'lsit'; did you mean 'list'?"), verb.err);
  const auto policy = run_pillbox({"policy", "chek", "strict"});
  CHECK(policy.exit_code == 2);
  CHECK_MESSAGE(contains(policy.err, "did you mean 'check'?"), policy.err);
  const auto option = run_pillbox({"quarantine", "list", "--jsno"});
  CHECK(option.exit_code == 2);
  CHECK_MESSAGE(contains(option.err, "unknown option --jsno; did you mean --json? (see: pillbox quarantine list --help)"),
                option.err);
  const auto far = run_pillbox({"frobnicate"});
  CHECK(far.exit_code == 2);
  CHECK(contains(far.err, "unknown command 'frobnicate'"));
  CHECK_FALSE(contains(far.err, "did you mean"));
}

TEST_CASE("--store before the command is the command's own --store") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  quarantine_into(store, 2);
  const auto after = run_pillbox({"quarantine", "list", "--json", "--store", store});
  REQUIRE(after.exit_code == 0);
  REQUIRE(after.records.size() == 2);
  for (const Words& args : {Words{"--store", store, "quarantine", "list", "--json"},
                            Words{"--store=" + store, "quarantine", "list", "--json"}}) {
    const auto before = run_pillbox(args);
    INFO(before.describe());
    CHECK(before.exit_code == 0);
    CHECK(before.out == after.out);
  }
  const auto stats = run_pillbox({"--store", store, "quarantine", "stats", "--json"});
  CHECK(stats.exit_code == 0);
  CHECK(stats.records.size() == 1);

  const std::string fresh = dir.path() + "/fresh";
  const auto run = run_pillbox({"--store", fresh, "run", "--handler", "echo", dir.write("in", "x")});
  CHECK(run.exit_code == 0);
  CHECK(::access((fresh + "/pillbox.db").c_str(), F_OK) == 0);

  const auto twice = run_pillbox({"--store", store, "quarantine", "list", "--store", store});
  CHECK(twice.exit_code == 2);
  CHECK_MESSAGE(contains(twice.err, "option --store given twice"), twice.err);
  const auto twice_before = run_pillbox({"--store", store, "--store=" + store, "quarantine", "list"});
  CHECK(twice_before.exit_code == 2);
  CHECK_MESSAGE(contains(twice_before.err, "option --store given twice"), twice_before.err);
  const auto none = run_pillbox({"--store", store, "policy", "show", "strict"});
  CHECK(none.exit_code == 2);
  CHECK_MESSAGE(contains(none.err, "unknown option --store (see: pillbox policy show --help)"), none.err);
  const auto missing = run_pillbox({"--store"});
  CHECK(missing.exit_code == 2);
  CHECK(contains(missing.err, "--store needs a value"));
}

TEST_CASE("short options: -j, -q, -o, -n, the same in every verb") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string input = dir.write("in", "hello");
  const auto quiet = run_pillbox({"run", "-j", "1", "-q", "--no-store", "--handler", "echo", input});
  INFO(quiet.describe());
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.out.empty());
  const auto loud = run_pillbox({"run", "-j", "1", "--no-store", "--handler", "echo", input});
  CHECK_FALSE(loud.out.empty());
  const auto out = run_pillbox({"run", "-qj1", "-o", dir.path() + "/out", "--no-store", "--handler", "echo", "-"},
                               task_line("k", "hello"));
  CHECK(out.exit_code == 0);
  CHECK(e2e::read_file(dir.path() + "/out/k.out") == "hello");

  quarantine_into(store, 1);
  const auto dry = run_pillbox({"quarantine", "purge", "--older-than", "0s", "-n", "--store", store});
  CHECK(dry.exit_code == 0);
  CHECK(contains(dry.out, "would purge 1 record"));
  const auto replay = run_pillbox({"quarantine", "replay", "--all", "-n", "--store", store});
  CHECK(replay.exit_code == 0);
  CHECK(contains(replay.out, "would replay 1 record"));
  CHECK(records(store) == 1);
  const auto exported = run_pillbox({"quarantine", "export", "1", "-o", dir.path() + "/payload", "--store", store});
  CHECK(exported.exit_code == 0);
  CHECK(e2e::read_file(dir.path() + "/payload") == "S payload 0");
}

TEST_CASE("--json on every verb that prints: one JSON document on stdout") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  quarantine_into(store, 3);

  const auto version = one_json_document(run_pillbox({"version", "--json"}));
  CHECK(version["version"].is_string());
  const auto check = one_json_document(run_pillbox({"policy", "check", "strict", "exec", "--json"}));
  REQUIRE(check["policies"].size() == 2);
  CHECK(check["policies"][0]["ok"] == true);
  CHECK(check["policies"][0]["name"] == "strict");
  CHECK(check["policies"][1]["default_action"].is_string());
  const std::string bad = dir.write("bad.policy", "[limits]\ncpu = fast\n");
  const auto checked_bad = run_pillbox({"policy", "check", bad, "--json"});
  CHECK(checked_bad.exit_code == 2);
  const auto bad_json = one_json_document(checked_bad);
  CHECK(bad_json["policies"][0]["ok"] == false);
  CHECK(contains(bad_json["policies"][0]["error"].get<std::string>(), "fast"));
  const auto shown = one_json_document(run_pillbox({"policy", "show", "strict", "--json"}));
  CHECK(shown["policy"]["name"] == "strict");
  CHECK(shown["limits"]["wall"].is_string());
  CHECK(shown["seccomp"]["allow"].is_array());
  CHECK(shown["seccomp"]["allow"].size() > 10);
  // Through sh: doctor's document spans lines, which run_pillbox would read
  // as JSON lines when it sees --json among the arguments.
  const auto doctor = one_json_document(e2e::run_command("/bin/sh", {"-c", pillbox::shell_quote(e2e::pillbox_binary()) + " doctor --json"}));
  CHECK(doctor["checks"].is_array());

  const auto replay = one_json_document(run_pillbox({"quarantine", "replay", "--all", "--dry-run", "--json", "--store", store}));
  CHECK(replay["dry_run"] == true);
  CHECK(replay["count"] == 3);
  CHECK(replay["records"][0]["status"] == "quarantined");
  const std::string file = dir.path() + "/exported";
  const auto exported = run_pillbox({"quarantine", "export", "2", "-o", file, "--json", "--store", store});
  CHECK(exported.exit_code == 0);
  const auto export_json = one_json_document(exported);
  CHECK(export_json["id"] == 2);
  CHECK(export_json["output"] == file);
  CHECK(export_json["bytes"] == e2e::read_file(file).size());
  CHECK(export_json["sha256"].get<std::string>().size() == 64);
  const auto discard = run_pillbox({"quarantine", "discard", "1", "2", "--reason", "known", "--json", "--store", store});
  CHECK(discard.exit_code == 0);
  const auto discard_json = one_json_document(discard);
  CHECK(discard_json["changed"] == 2);
  CHECK(discard_json["discarded"][0]["id"] == 1);
  CHECK(discard_json["discarded"][0]["was"] == "quarantined");
  const auto again = one_json_document(run_pillbox({"quarantine", "discard", "1", "--reason", "x", "--json", "--store", store}));
  CHECK(again["already_discarded"] == nlohmann::json::array({1}));
  CHECK(again["changed"] == 0);
  const auto dry = one_json_document(run_pillbox({"quarantine", "purge", "--older-than", "0s", "--dry-run", "--json", "--store", store}));
  CHECK(dry["dry_run"] == true);
  CHECK(dry["records"] == 3);
  CHECK(dry["open_records"] == 1);
  CHECK(dry["ids"] == nlohmann::json::array({1, 2, 3}));
  const auto purged = one_json_document(run_pillbox({"quarantine", "purge", "--older-than", "0s", "--status", "discarded", "--json", "--store", store}));
  CHECK(purged["dry_run"] == false);
  CHECK(purged["records"] == 2);
  CHECK(purged["open_records"] == 0);
  CHECK(purged["ids"] == nlohmann::json::array({1, 2}));
  CHECK(records(store) == 1);
}

TEST_CASE("durations with decimals, as GNU timeout takes them") {
  e2e::TempDir dir;
  const std::string input = dir.write("in", "x");
  // 0.5s: the command is stopped by the wall-clock limit half a second in.
  const auto slow = run_pillbox({"run", "--no-store", "--max-attempts", "1", "--timeout", "0.5s", "--json", input, "--",
                                 "/bin/sleep", "30"});
  INFO(slow.describe());
  REQUIRE(slow.records.size() == 1);
  CHECK(slow.records[0]["kind"] == "wall-timeout");
  CHECK(slow.seconds < 20);
  for (const Words& args : {Words{"--timeout", "1.5x"}, Words{"--timeout", "-1s"}, Words{"--timeout", "nan"},
                            Words{"--backoff-base", "1e3"}, Words{"--hook-timeout", "0.00001s"}}) {
    const auto bad = run_pillbox(plus(plus({"run", "--no-store", "--handler", "echo"}, args), {input}));
    INFO(bad.describe());
    CHECK(bad.exit_code == 2);
    CHECK(contains(bad.err, args[0]));
  }
  e2e::TempDir store_dir;
  const std::string store = store_dir.path() + "/store";
  quarantine_into(store, 1);
  const auto since = one_json_document(run_pillbox({"quarantine", "purge", "--older-than", "1.5d", "-n", "--json", "--store", store}));
  CHECK(since["records"] == 0);  // made seconds ago
  const auto list = run_pillbox({"quarantine", "list", "--since", "0.5h", "--json", "--store", store});
  CHECK(list.exit_code == 0);
  CHECK(list.records.size() == 1);
}

TEST_CASE("purge: --dry-run deletes nothing; open records go only when confirmed") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  quarantine_into(store, 3);
  const auto dry = run_pillbox({"quarantine", "purge", "--older-than", "0s", "--dry-run", "--store", store});
  CHECK(dry.exit_code == 0);
  CHECK(contains(dry.out, "would purge 3 records (3 still open); nothing deleted"));
  CHECK(records(store) == 3);

  // No terminal to ask (stdin is a pipe): refused, nothing deleted.
  const auto refused = run_pillbox({"quarantine", "purge", "--older-than", "0s", "--store", store}, "y\n");
  INFO(refused.describe());
  CHECK(refused.exit_code == 2);
  CHECK(contains(refused.err, "3 open records"));
  CHECK(contains(refused.err, "add --yes"));
  CHECK(refused.out.empty());
  CHECK(records(store) == 3);

  // On a terminal: asked; anything but yes deletes nothing.
  const auto declined = run_on_terminal({"quarantine", "purge", "--older-than", "0s", "--store", store}, "n\n");
  CHECK(declined.exit_code == 2);
  CHECK_MESSAGE(contains(declined.screen, "delete 3 open records? [y/N]"), declined.screen);
  CHECK(records(store) == 3);

  // Closed records need no confirmation.
  REQUIRE(run_pillbox({"quarantine", "discard", "1", "--reason", "r", "--store", store}).exit_code == 0);
  const auto closed = run_pillbox({"quarantine", "purge", "--older-than", "0s", "--status", "discarded", "--store", store});
  CHECK(closed.exit_code == 0);
  CHECK(contains(closed.out, "purged 1 record"));
  CHECK(records(store) == 2);

  const auto confirmed = run_on_terminal({"quarantine", "purge", "--older-than", "0s", "--store", store}, "y\n");
  CHECK_MESSAGE(confirmed.exit_code == 0, confirmed.screen);
  CHECK(contains(confirmed.screen, "purged 2 records"));
  CHECK(records(store) == 0);

  quarantine_into(dir.path() + "/second", 2);
  const auto yes = run_pillbox({"quarantine", "purge", "--older-than", "0s", "--yes", "--store", dir.path() + "/second"});
  CHECK(yes.exit_code == 0);
  CHECK(records(dir.path() + "/second") == 0);
}

TEST_CASE("with --store before the command, a hook's token is still overwritten in /proc/PID/cmdline") {
  // The command sees argv's own words, rearranged, not copies: what
  // OptionSpec::secret overwrites is what /proc shows. A spawn-mode task has
  // no PID namespace and would see the supervisor's command line.
  const std::string scan = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'hook-sec[r]et-77c1'; exit 0";
  e2e::TempDir store(0700);
  e2e::TempDir in;
  const std::string input = in.write("payload", "x");
  const auto r = run_pillbox({"--store", store.path() + "/s", "run", "--json", "--mode", "spawn", "--on-quarantine",
                              "logger -t pillbox hook-secret-77c1", "--on-new-fingerprint=true hook-secret-77c1", input,
                              "--", "/bin/sh", "-c", scan});
  INFO(r.describe());
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["kind"] == "ok");
  CHECK(r.records[0]["output"] == "0\n");
}
