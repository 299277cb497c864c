#include "supervisor/exec/install_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "shared/install_layout.h"

namespace pillbox {
namespace {

// The first candidate that `usable` accepts; the environment variable, when
// set, is the only candidate (an operator who names a file means that file).
HelperLocation first_usable(std::string what, const char* env, const std::vector<std::filesystem::path>& candidates,
                            int access_mode) {
  HelperLocation found;
  found.what = std::move(what);
  found.env = env;
  std::vector<std::filesystem::path> places = candidates;
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') {
    found.from_env = true;
    places = {v};
  }
  for (const auto& place : places) {
    found.looked.push_back(place.string());
    std::error_code ec;
    if (::access(place.c_str(), access_mode) == 0 && std::filesystem::is_regular_file(place, ec)) {
      found.path = place.string();
      break;
    }
  }
  return found;
}

}  // namespace

HelperLocation locate_sandbox_binary() {
  return first_usable(std::string("the sandbox binary ") + layout::kSandboxName, "PILLBOX_SANDBOX",
                      layout::sandbox_candidates(layout::running_executable_dir()), X_OK);
}

HelperLocation locate_crash_library() {
  HelperLocation found = first_usable(std::string("the crash library ") + layout::kCrashLibraryName, "PILLBOX_CRASH_LIB",
                                      layout::crash_library_candidates(layout::running_executable_dir()), R_OK);
  // Canonical: the path is preloaded into programs that run elsewhere.
  std::error_code ec;
  if (!found.path.empty()) {
    if (const auto canonical = std::filesystem::canonical(found.path, ec); !ec) found.path = canonical.string();
  }
  return found;
}

HelperLocation locate_pdf_text_module(const std::string& sandbox_binary) {
  const std::filesystem::path dir = sandbox_binary.empty() ? std::filesystem::path() : std::filesystem::path(sandbox_binary).parent_path();
  return first_usable(std::string("the pdf-text module ") + layout::kPdfTextModuleName, "PILLBOX_PDF_TEXT_LIB",
                      layout::pdf_text_candidates(dir), R_OK);
}

std::string missing_helper_message(const HelperLocation& missing) {
  std::string looked;
  for (const auto& place : missing.looked) looked += (looked.empty() ? "" : ", ") + place;
  if (looked.empty()) looked = "nowhere: /proc/self/exe is unreadable, so pillbox cannot tell where it is installed";
  if (missing.from_env) {
    return "cannot find " + missing.what + ": " + missing.env + " names " + looked +
           ", which is not there (or not usable); unset " + missing.env + " or point it at the file";
  }
  return "cannot find " + missing.what + " (looked in: " + looked +
         "). pillbox needs its helpers beside it: install it with `cmake --install BUILD_DIR --prefix PREFIX` "
         "and run PREFIX/bin/pillbox, or run it from its build directory (a copy of the pillbox binary alone "
         "does not work), or set " + missing.env + " to the file";
}

std::string find_sandbox_binary() { return locate_sandbox_binary().path; }

std::string sandbox_binary_or_found(const std::string& chosen) {
  return chosen.empty() ? find_sandbox_binary() : chosen;
}

std::string find_crash_library() { return locate_crash_library().path; }

}  // namespace pillbox
