#pragma once
// Where the helper binaries live, relative to the running `pillbox`
// executable (build tree or install prefix), overridable by environment.
#include <string>

namespace pillbox {

// $PILLBOX_SANDBOX, else pillbox-sandbox next to pillbox, else ../libexec/pillbox/.
std::string find_sandbox_binary();
// `chosen` when it is set (a caller or a test names its own binary), else
// find_sandbox_binary(): what every settings field documented as
// "" = find_sandbox_binary() resolves to.
std::string sandbox_binary_or_found(const std::string& chosen);
// $PILLBOX_CRASH_LIB, else libpillbox-crash.so next to pillbox, else ../lib/pillbox/. "" if none.
std::string find_crash_library();

}  // namespace pillbox
