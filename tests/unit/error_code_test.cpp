// Errors carry a code from where they are made to where they are reported,
// and the CLI's exit code is chosen from it, never from the message.
#include <doctest/doctest.h>

#include <string>

#include "sandbox/child_runtime.h"
#include "shared/control.h"
#include "shared/status.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"

// exit_code.cpp is compiled into the `pillbox` executable only (CLI_SOURCES),
// not into a library the unit binary links; compile it into this test instead.
#include "supervisor/cli/exit_code.cpp"

using namespace pillbox;

TEST_CASE("error code: the CLI's exit code follows the code") {
  CHECK(cli::exit_code_for(ErrorCode::kSetup) == cli::kExitSetup);
  CHECK(cli::exit_code_for(ErrorCode::kUsage) == cli::kExitUsage);
  CHECK(cli::exit_code_for(ErrorCode::kConfig) == cli::kExitUsage);
  // The documented numbers (commands.h, README.md).
  CHECK(cli::exit_code_for(ErrorCode::kSetup) == 3);
  CHECK(cli::exit_code_for(ErrorCode::kUsage) == 2);
}

TEST_CASE("error code: an error nobody classified is a setup error") {
  CHECK(Status::error("disk full").code() == ErrorCode::kSetup);
  const Expected<int> e = Error{"disk full"};
  CHECK(e.error_code() == ErrorCode::kSetup);
  CHECK(cli::exit_code_for(e.error_code()) == cli::kExitSetup);
}

TEST_CASE("error code: Status and Expected keep the code with the message") {
  const Status s = Status::error("no such record", ErrorCode::kUsage);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message() == "no such record");
  CHECK(s.code() == ErrorCode::kUsage);
  const Status copy = s;
  CHECK(copy.code() == ErrorCode::kUsage);

  const Expected<std::string> e = Error{"bad handler", ErrorCode::kConfig};
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error() == "bad handler");
  CHECK(e.error_code() == ErrorCode::kConfig);
  const Status from_expected = e.status();
  CHECK(from_expected.message() == "bad handler");
  CHECK(from_expected.code() == ErrorCode::kConfig);
  CHECK(cli::exit_code_for(from_expected.code()) == cli::kExitUsage);

  const Expected<std::string> value = std::string("fine");
  CHECK(value.status().is_ok());
}

TEST_CASE("error code: a handler that does not exist is a config error where it is loaded, whatever it says") {
  ChildConfig config;
  config.handler = "no-such-handler";
  auto prepared = sandbox::prepare_child(config);
  REQUIRE_FALSE(prepared.has_value());
  CHECK(prepared.error_code() == ErrorCode::kConfig);
  CHECK(cli::exit_code_for(prepared.error_code()) == cli::kExitUsage);
  // The message people read is unchanged: it still opens with the prefix.
  CHECK(prepared.error().rfind(kConfigErrorPrefix, 0) == 0);
  CHECK(prepared.error().find("'no-such-handler'") != std::string::npos);
}
