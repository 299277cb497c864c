// libFuzzer harness: the policy-file parser. Policy files are written by
// people and passed around; a malformed one must give a one-line error, never
// a crash. Property checked: a policy that parses renders (format_policy) to
// text that parses to the same rendering.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "shared/policy_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // import_oci paths resolve under a directory that does not exist, so the
  // harness never depends on files of the machine it runs on.
  auto policy = pillbox::parse_policy(text, "fuzz.policy", "/nonexistent-pillbox-fuzz");
  if (!policy) {
    FUZZ_CHECK(!policy.error().empty());
    FUZZ_CHECK(policy.error().find('\n') == std::string::npos);
    return 0;
  }
  const std::string rendered = pillbox::format_policy(*policy);
  auto reparsed = pillbox::parse_policy(rendered, "fuzz.policy", "/nonexistent-pillbox-fuzz");
  FUZZ_CHECK(reparsed.has_value());
  FUZZ_CHECK(pillbox::format_policy(*reparsed) == rendered);
  return 0;
}
