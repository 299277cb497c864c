// OCI / Docker seccomp profile import: regressions found by fuzzing
// (fuzz/oci_import_fuzzer.cpp). The import's rules are tested with the policy
// format in policy_parser_test.cpp.
#include "shared/oci_import.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace pillbox {
namespace {

using namespace std::string_literals;

// nlohmann's parser stops at a NUL byte as if the input ended there, so a
// profile followed by "\0" and anything at all used to import, the rest
// silently ignored (while the same text wrapped in a config.json failed).
TEST_CASE("OCI import: a NUL byte is malformed JSON, not the end of the profile") {
  // The fuzzer's input, byte for byte: a profile, 23 NUL bytes, a newline.
  const std::string found = R"({"defaultAction": "SCMP_falseACT_LGO", "syscalls": null})"s + std::string(23, '\0') + "\n";
  const auto imported = import_oci_seccomp(found, "fuzz.json");
  REQUIRE_FALSE(imported.has_value());
  CHECK(imported.error() == "fuzz.json: malformed JSON at byte 57: a NUL byte, which JSON text cannot contain");

  // What it allowed: an allowlist with more after a NUL, none of it read.
  const std::string smuggled =
      R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]})"s +
      '\0' + R"({"names": ["ptrace"]})";
  CHECK_FALSE(import_oci_seccomp(smuggled, "p.json").has_value());
  CHECK_FALSE(import_oci_seccomp("{\"defaultAction\": \"SCMP_ACT_ERRNO\"}\0"s, "p.json").has_value());
  CHECK(import_oci_seccomp("\0"s, "p.json").error() ==
        "p.json: malformed JSON at byte 1: a NUL byte, which JSON text cannot contain");

  // An escaped NUL inside a string is JSON; the name is no syscall, so it is skipped.
  const auto escaped = import_oci_seccomp(
      R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "\u0000"], "action": "SCMP_ACT_ALLOW"}]})",
      "p.json");
  REQUIRE_MESSAGE(escaped.has_value(), escaped.error());
  CHECK(*escaped == std::vector<std::string>{"read"});
}

// JSON can escape a NUL inside a name; libseccomp reads names as C strings,
// so "read\u0000x" used to be imported (and later allowed) as read.
TEST_CASE("OCI import: a name with a NUL in it is no syscall's name") {
  const auto names = import_oci_seccomp(
      R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read\u0000x", "write\u0000", "close"], "action": "SCMP_ACT_ALLOW"}]})",
      "p.json");
  REQUIRE_MESSAGE(names.has_value(), names.error());
  CHECK(*names == std::vector<std::string>{"close"});
}

}  // namespace
}  // namespace pillbox
