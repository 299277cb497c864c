#pragma once
// Where the helpers `pillbox` runs or loads live: relative to the running
// executable, in a build tree or an installed tree (shared/install_layout.h),
// each overridable by an environment variable.
#include <string>
#include <vector>

namespace pillbox {

// One helper and where it was looked for.
struct HelperLocation {
  std::string what;                 // "the sandbox binary pillbox-sandbox", for messages
  std::string path;                 // where it is; "" when it was not found
  std::string env;                  // the variable that overrides the search
  bool from_env = false;            // `path` (or the miss) comes from `env`
  std::vector<std::string> looked;  // every place looked, in order
};

// $PILLBOX_SANDBOX, else pillbox-sandbox next to pillbox, else the installed
// tree's libexec/pillbox/. Only an executable file counts.
HelperLocation locate_sandbox_binary();
// $PILLBOX_CRASH_LIB, else libpillbox-crash.so next to pillbox, else the
// installed tree's lib/pillbox/. Canonical when found.
HelperLocation locate_crash_library();
// Where the zygote will find libpillbox-pdf-text.so: $PILLBOX_PDF_TEXT_LIB,
// else next to the sandbox binary, else the installed tree's lib/pillbox/
// (the sandbox side's own search, sandbox/handlers/pdf_text_loader.cpp).
HelperLocation locate_pdf_text_module(const std::string& sandbox_binary);

// What to tell the operator when `missing` was not found: every place
// looked, and how to get a working pillbox.
std::string missing_helper_message(const HelperLocation& missing);

// locate_sandbox_binary().path: "" when there is none.
std::string find_sandbox_binary();
// `chosen` when set, else find_sandbox_binary(): how every settings field
// documented as "" = find_sandbox_binary() resolves.
std::string sandbox_binary_or_found(const std::string& chosen);
// locate_crash_library().path: "" when there is none.
std::string find_crash_library();

}  // namespace pillbox
