// libFuzzer harness: the OCI / Docker seccomp profile import
// (`import_oci = profile.json` in a policy). Profiles are downloaded and
// passed around: hostile JSON must give a clean error, never a crash.
// Properties checked:
//   - an error is one line and starts with the origin ("profile.json: ");
//   - an import is sorted, without duplicates, and names only syscalls this
//     architecture has (whole names: no NUL byte);
//   - a profile that imports imports the same when wrapped in an OCI
//     config.json (linux.seccomp), unless it had no defaultAction of its own.
#include <seccomp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "shared/oci_import.h"

namespace {

constexpr std::string_view kOrigin = "profile.json";

void check_error(const std::string& error) {
  FUZZ_CHECK(error.starts_with(std::string(kOrigin) + ": "));
  FUZZ_CHECK(error.find_first_of("\r\n") == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto names = pillbox::import_oci_seccomp(text, kOrigin);
  if (!names) {
    check_error(names.error());
    return 0;
  }
  FUZZ_CHECK(std::is_sorted(names->begin(), names->end()));
  FUZZ_CHECK(std::adjacent_find(names->begin(), names->end()) == names->end());
  for (const std::string& name : *names) {
    // A name is what libseccomp resolves: all of it (c_str() stops at a NUL).
    FUZZ_CHECK(!name.empty() && name.find('\0') == std::string::npos);
    FUZZ_CHECK(seccomp_syscall_resolve_name(name.c_str()) >= 0);
  }

  // It parsed, so the text is one JSON value: wrapping it is well-formed JSON
  // (the parser skips a byte order mark only at the very start).
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const std::string config = "{\"linux\": {\"seccomp\": " + std::string(text) + "}}";
  const auto wrapped = pillbox::import_oci_seccomp(config, kOrigin);
  if (!wrapped) {
    check_error(wrapped.error());
    // The bare text imported through its own linux.seccomp.
    FUZZ_CHECK(wrapped.error() == std::string(kOrigin) + ": linux.seccomp.defaultAction is missing");
  } else {
    FUZZ_CHECK(*wrapped == *names);
  }
  return 0;
}
