#include "shared/install_layout.h"

// Relative paths between the install directories, computed by CMakeLists.txt
// from GNUInstallDirs and given to this file only. The defaults are the
// usual layout (bin, libexec, lib), for a compiler run outside CMake.
#ifndef PILLBOX_BIN_TO_HELPERS
#define PILLBOX_BIN_TO_HELPERS "../libexec/pillbox"
#endif
#ifndef PILLBOX_BIN_TO_MODULES
#define PILLBOX_BIN_TO_MODULES "../lib/pillbox"
#endif
#ifndef PILLBOX_HELPERS_TO_MODULES
#define PILLBOX_HELPERS_TO_MODULES "../../lib/pillbox"
#endif

namespace pillbox::layout {

std::filesystem::path running_executable_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  // The current directory is no substitute: a helper found there would be
  // whatever the caller's working directory happens to hold.
  return ec ? std::filesystem::path() : exe.parent_path();
}

namespace {

std::vector<std::filesystem::path> beside_then_installed(const std::filesystem::path& dir, const char* installed_dir,
                                                         const char* name) {
  if (dir.empty()) return {};
  return {dir / name, (dir / installed_dir / name).lexically_normal()};
}

}  // namespace

std::vector<std::filesystem::path> sandbox_candidates(const std::filesystem::path& pillbox_dir) {
  return beside_then_installed(pillbox_dir, PILLBOX_BIN_TO_HELPERS, kSandboxName);
}

std::vector<std::filesystem::path> crash_library_candidates(const std::filesystem::path& pillbox_dir) {
  return beside_then_installed(pillbox_dir, PILLBOX_BIN_TO_MODULES, kCrashLibraryName);
}

std::vector<std::filesystem::path> pdf_text_candidates(const std::filesystem::path& sandbox_dir) {
  return beside_then_installed(sandbox_dir, PILLBOX_HELPERS_TO_MODULES, kPdfTextModuleName);
}

}  // namespace pillbox::layout
