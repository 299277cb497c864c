// An exec command line made into a config (supervisor/exec/child_setup.h):
// resolved against the directory it was typed in, which the config keeps,
// whether that is this process's or the one a record names.
#include "supervisor/exec/child_setup.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "shared/policy_parser.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

Policy exec_policy() {
  auto p = resolve_policy("exec");
  REQUIRE(p.has_value());
  return *p;
}

HandlerChoice exec_choice(std::vector<std::string> argv, std::string working_dir) {
  HandlerChoice c;
  c.handler = "exec";
  c.exec_argv = std::move(argv);
  c.working_dir = std::move(working_dir);
  return c;
}

}  // namespace

TEST_CASE("an exec command line from a record resolves against the record's directory, not this process's") {
  test::ScratchDir dir("child-setup");
  const std::string tool = dir.write("bin/tool", "#!/bin/sh\n");
  ::chmod(tool.c_str(), 0755);
  dir.write("parser.py", "print(1)\n");
  REQUIRE(std::filesystem::current_path() != std::filesystem::path(dir.path));
  auto config = make_child_config(
      exec_choice({"bin/tool", "parser.py", "-v", "{}", "missing.txt", "--grammar=parser.py"}, dir.path),
      exec_policy());
  REQUIRE_MESSAGE(config.has_value(), config.error());
  CHECK(config->working_dir == dir.path);
  // What names a file there is made absolute; options, the placeholder and
  // words that name nothing stay as typed.
  CHECK(config->exec_argv == std::vector<std::string>{std::filesystem::canonical(tool).string(),
                                                      dir.path + "/parser.py", "-v", "{}", "missing.txt",
                                                      "--grammar=parser.py"});
  CHECK(config->exec_payload_as_file);
}

TEST_CASE("an exec command line typed here keeps this process's directory") {
  auto config = make_child_config(exec_choice({"/bin/cat", "{}"}, ""), exec_policy());
  REQUIRE_MESSAGE(config.has_value(), config.error());
  CHECK(config->working_dir == std::filesystem::current_path().string());
  // A handler has none: it reads no files of the command line's.
  HandlerChoice echo;
  echo.handler = "echo";
  auto handler = make_child_config(echo, exec_policy());
  REQUIRE(handler.has_value());
  CHECK(handler->working_dir.empty());
}

TEST_CASE("a recorded working directory that is gone, not a directory, or not absolute: an error that says so") {
  test::ScratchDir dir("child-setup");
  const std::string file = dir.write("file", "x");
  const struct {
    std::string working_dir;
    const char* says;
  } cases[] = {
      {dir.path + "/gone", " is gone ("},
      {file, " is not a directory"},
      {"relative/dir", "is not an absolute path"},
      {std::string("/tmp\0/etc", 9), "is not an absolute path"},  // a NUL would cut the path short
  };
  for (const auto& c : cases) {
    CAPTURE(c.working_dir);
    auto config = make_child_config(exec_choice({"/bin/cat", "{}"}, c.working_dir), exec_policy());
    REQUIRE_FALSE(config.has_value());
    CHECK_MESSAGE(config.error().find(c.says) != std::string::npos, config.error());
    CHECK(config.error_code() == ErrorCode::kSetup);
  }
}

TEST_CASE("a record's working directory comes back from the record") {
  store::QuarantineEntry e;
  e.handler = "exec";
  e.exec_argv = R"(["/bin/cat","{}"])";
  e.working_dir = "/srv/parsers";
  auto choice = recorded_handler(e);
  REQUIRE(choice.has_value());
  CHECK(choice->working_dir == "/srv/parsers");
}

}  // namespace pillbox
