#include "supervisor/cli/args.h"

#include <doctest/doctest.h>

// args.cpp is compiled into the `pillbox` executable only (CLI_SOURCES), not
// into a library the unit binary links; compile it into this test instead.
#include "supervisor/cli/args.cpp"

#include <string>
#include <vector>

namespace pillbox::cli {
namespace {

const std::vector<OptionSpec> kSpecs = {
    {"handler", true, false},
    {"jobs", true, false},
    {"arg", true, true},
    {"json", false, false},
    {"verbose", false, true},
    {"out", true, false},
};

// argv as main() gets it: "pillbox run ..."; parsing starts after the subcommand.
Expected<Args> parse(std::vector<std::string> words) {
  words.insert(words.begin(), {"pillbox", "run"});
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return Args::parse(static_cast<int>(words.size()), argv.data(), 2, kSpecs, "run");
}

Args ok(std::vector<std::string> words) {
  auto a = parse(std::move(words));
  REQUIRE_MESSAGE(a.has_value(), a.error());
  return std::move(a.value());
}

std::string err(std::vector<std::string> words) {
  auto a = parse(std::move(words));
  REQUIRE_FALSE(a.has_value());
  return a.error();
}

using Strings = std::vector<std::string>;

TEST_CASE("args: nothing at all") {
  const Args a = ok({});
  CHECK(a.positional().empty());
  CHECK(a.after_dashdash().empty());
  CHECK_FALSE(a.has_dashdash());
  CHECK_FALSE(a.value("handler").has_value());
  CHECK(a.values("arg").empty());
  CHECK_FALSE(a.flag("json"));
}

TEST_CASE("args: --name value and --name=value") {
  const Args a = ok({"--handler", "regex", "--jobs=4"});
  CHECK(a.value("handler") == std::optional<std::string>("regex"));
  CHECK(a.value("jobs") == std::optional<std::string>("4"));
  CHECK(a.values("handler") == Strings{"regex"});
  CHECK(a.positional().empty());

  // Only the first '=' separates; an empty inline value is a value.
  const Args b = ok({"--arg=pattern=a=b", "--out="});
  CHECK(a.value("out") == std::nullopt);
  CHECK(b.values("arg") == Strings{"pattern=a=b"});
  CHECK(b.value("out") == std::optional<std::string>(""));

  // The next word is the value, even when it looks like an option or is "-".
  const Args c = ok({"--out", "--json", "--handler", "-"});
  CHECK(c.value("out") == std::optional<std::string>("--json"));
  CHECK_FALSE(c.flag("json"));
  CHECK(c.value("handler") == std::optional<std::string>("-"));
}

TEST_CASE("args: a secret option's value is read, then overwritten in argv (what /proc/PID/cmdline shows)") {
  const std::vector<OptionSpec> specs = {{"hook", true, false, 0, true}, {"jobs"}};
  std::vector<std::string> words = {"pillbox", "run", "--hook", "curl -H token:abc", "--hook=x", "--jobs", "2"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  // "--hook" twice is an error (not repeatable), so parse the two forms apart.
  auto a = Args::parse(4, argv.data(), 2, specs, "run");
  REQUIRE(a.has_value());
  CHECK(a->value("hook") == "curl -H token:abc");
  CHECK(std::string(argv[3]) == "*****************");
  auto b = Args::parse(7, argv.data(), 4, specs, "run");
  REQUIRE(b.has_value());
  CHECK(b->value("hook") == "x");
  CHECK(std::string(argv[4]) == "--hook=*");
  CHECK(std::string(argv[6]) == "2");  // other values are left alone
}

TEST_CASE("args: flags") {
  const Args a = ok({"--json", "input.jsonl"});
  CHECK(a.flag("json"));
  CHECK_FALSE(a.flag("verbose"));
  CHECK(a.positional() == Strings{"input.jsonl"});
  const Args v = ok({"--verbose", "--verbose", "--verbose"});
  CHECK(v.flag("verbose"));
  CHECK(v.values("verbose").size() == 3);
}

TEST_CASE("args: repeatable options keep every value in order") {
  const Args a = ok({"--arg", "k1=v1", "x", "--arg=k2=v2", "--arg", "k1=v3"});
  CHECK(a.values("arg") == Strings{"k1=v1", "k2=v2", "k1=v3"});
  CHECK(a.value("arg") == std::optional<std::string>("k1=v3"));  // the last one
  CHECK(a.positional() == Strings{"x"});
}

TEST_CASE("args: positionals, in order, with '-' as a positional") {
  const Args a = ok({"a.json", "-", "--json", "dir/", "-"});
  CHECK(a.positional() == Strings{"a.json", "-", "dir/", "-"});
  CHECK(a.flag("json"));
}

TEST_CASE("args: everything after -- is kept verbatim") {
  const Args a = ok({"--handler", "exec", "in", "--", "/usr/bin/prog", "--json", "-x", "--", "{}", "--jobs=3", ""});
  CHECK(a.has_dashdash());
  CHECK(a.after_dashdash() == Strings{"/usr/bin/prog", "--json", "-x", "--", "{}", "--jobs=3", ""});
  CHECK(a.positional() == Strings{"in"});
  CHECK_FALSE(a.flag("json"));
  CHECK_FALSE(a.value("jobs").has_value());
  CHECK(a.value("handler") == std::optional<std::string>("exec"));

  const Args empty = ok({"--"});
  CHECK(empty.has_dashdash());
  CHECK(empty.after_dashdash().empty());

  // The value of an option may itself be "--".
  const Args v = ok({"--out", "--", "rest"});
  CHECK(v.value("out") == std::optional<std::string>("--"));
  CHECK_FALSE(v.has_dashdash());
  CHECK(v.positional() == Strings{"rest"});
}

TEST_CASE("args: errors") {
  CHECK(err({"--bogus"}) == "unknown option --bogus (see: pillbox run --help)");
  CHECK(err({"--bogus=1"}) == "unknown option --bogus (see: pillbox run --help)");
  CHECK(err({"-x", "4"}) == "unknown option -x (see: pillbox run --help)");
  CHECK(err({"in", "-x"}) == "unknown option -x (see: pillbox run --help)");
  CHECK(err({"--JSON"}) == "unknown option --JSON (see: pillbox run --help)");
  CHECK(err({"--jobs"}) == "option --jobs needs a value (see: pillbox run --help)");
  CHECK(err({"--json", "--handler"}) == "option --handler needs a value (see: pillbox run --help)");
  CHECK(err({"--json=yes"}) == "option --json takes no value (see: pillbox run --help)");
  CHECK(err({"--json="}) == "option --json takes no value (see: pillbox run --help)");
  CHECK(err({"--jobs", "2", "--jobs=3"}) == "option --jobs given twice (see: pillbox run --help)");
  CHECK(err({"--json", "--json"}) == "option --json given twice (see: pillbox run --help)");
  // An error after "--" cannot happen: the rest is not parsed.
  CHECK(ok({"--", "--bogus"}).after_dashdash() == Strings{"--bogus"});
}

TEST_CASE("args: --help or -h anywhere before -- wins over every other argument and every error") {
  for (const Strings& words : {Strings{"--help"}, Strings{"-h"}, Strings{"--bogus", "--help"},
                               Strings{"in", "--jobs", "2", "--jobs", "3", "-h"}, Strings{"--json=yes", "--help"},
                               Strings{"--help", "--jobs"}}) {
    const Args a = ok(words);
    CHECK(a.flag("help"));
    CHECK(a.positional().empty());
    CHECK_FALSE(a.flag("json"));
  }
  // The value of an option, or a word after --, is not a request for help.
  const Args v = ok({"--out", "--help", "--", "--help"});
  CHECK_FALSE(v.flag("help"));
  CHECK(v.value("out") == std::optional<std::string>("--help"));
  CHECK(v.after_dashdash() == Strings{"--help"});
}

TEST_CASE("args: the common options have the same short names in every verb") {
  const Args a = ok({"-j", "4", "-o", "dir"});
  CHECK(a.value("jobs") == std::optional<std::string>("4"));
  CHECK(a.value("out") == std::optional<std::string>("dir"));
  CHECK(err({"-j", "4", "--jobs", "5"}) == "option --jobs given twice (see: pillbox run --help)");

  std::vector<std::string> words = {"pillbox", "quarantine", "purge", "-qn", "-y"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  const std::vector<OptionSpec> specs = {{"quiet", false}, {"dry-run", false}, {"yes", false, false, 'y'}};
  auto b = Args::parse(static_cast<int>(argv.size()), argv.data(), 3, specs, "quarantine purge");
  REQUIRE_MESSAGE(b.has_value(), b.error());
  CHECK(b->flag("quiet"));  // bundled short flags
  CHECK(b->flag("dry-run"));
  CHECK(b->flag("yes"));
  words = {"pillbox", "run", "-qj"};
  argv.clear();
  for (auto& w : words) argv.push_back(w.data());
  auto d = Args::parse(static_cast<int>(argv.size()), argv.data(), 2, {{"quiet", false}, {"jobs"}}, "run");
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error() == "option --jobs needs a value (see: pillbox run --help)");

  // A letter a verb gives to another option of its own keeps that meaning there.
  const std::vector<OptionSpec> own = {{"jar", true, false, 'j'}, {"jobs"}};
  words = {"pillbox", "x", "-j", "a.jar"};
  argv.clear();
  for (auto& w : words) argv.push_back(w.data());
  auto c = Args::parse(static_cast<int>(argv.size()), argv.data(), 2, own, "x");
  REQUIRE(c.has_value());
  CHECK(c->value("jar") == std::optional<std::string>("a.jar"));
  CHECK_FALSE(c->value("jobs"));
}

TEST_CASE("args: an unknown option close to a known one: did you mean") {
  CHECK(err({"--jsno"}) == "unknown option --jsno; did you mean --json? (see: pillbox run --help)");
  CHECK(err({"--hadler=echo"}) == "unknown option --hadler; did you mean --handler? (see: pillbox run --help)");
  CHECK(err({"--jbos", "2"}) == "unknown option --jbos; did you mean --jobs? (see: pillbox run --help)");
  CHECK(err({"--zzzzzz"}) == "unknown option --zzzzzz (see: pillbox run --help)");
  CHECK(err({"--=x"}) == "unknown option --=x (see: pillbox run --help)");
  CHECK(err({"-x=1"}) == "unknown option -x=1 (see: pillbox run --help)");
  CHECK(err({"---json"}).starts_with("unknown option ---json"));
  CHECK(err({"-qj"}).starts_with("unknown option -qj"));  // no -q here; nothing half-read
  // Hostile lengths: no suggestion, no time spent.
  CHECK(err({"--" + std::string(100000, 'j')}).starts_with("unknown option --jjjj"));
}

TEST_CASE("args: did you mean, past typos: a part of a longer name, a letter other tools give a meaning") {
  const auto error_of = [](const std::vector<OptionSpec>& specs, std::vector<std::string> words, const char* verb) {
    words.insert(words.begin(), {"pillbox", verb});
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    auto parsed = Args::parse(static_cast<int>(words.size()), argv.data(), 2, specs, verb);
    REQUIRE_FALSE(parsed.has_value());
    return parsed.error();
  };
  // reproduce -n 3: a count, as in head -n (issue 26, point 6).
  const std::vector<OptionSpec> reproduce = {{"runs"}, {"jobs"}, {"json", false}, {"store"}};
  CHECK(error_of(reproduce, {"-n", "3", "1"}, "reproduce") ==
        "unknown option -n; did you mean --runs? (see: pillbox reproduce --help)");
  // minimize --runs 3: its option is --max-runs.
  const std::vector<OptionSpec> minimize = {{"max-runs"}, {"max-time"}, {"jobs"}, {"restart", false}};
  CHECK(error_of(minimize, {"--runs", "3", "1"}, "minimize") ==
        "unknown option --runs; did you mean --max-runs? (see: pillbox minimize --help)");
  CHECK(error_of(minimize, {"--time=5m", "1"}, "minimize") ==
        "unknown option --time; did you mean --max-time? (see: pillbox minimize --help)");
  // Two options hold the part: no guess. A letter without a meaning here: none.
  CHECK(error_of(minimize, {"--max", "1"}, "minimize") == "unknown option --max (see: pillbox minimize --help)");
  CHECK(error_of(minimize, {"-z", "1"}, "minimize") == "unknown option -z (see: pillbox minimize --help)");
  CHECK(error_of(reproduce, {"-t", "5s", "1"}, "reproduce") == "unknown option -t (see: pillbox reproduce --help)");
}

TEST_CASE("args: the command name appears in the hint") {
  std::vector<std::string> words = {"pillbox", "quarantine", "list", "--nope"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  auto a = Args::parse(static_cast<int>(argv.size()), argv.data(), 3, {{"json", false, false}}, "quarantine list");
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error() == "unknown option --nope (see: pillbox quarantine list --help)");
}

}  // namespace
}  // namespace pillbox::cli
