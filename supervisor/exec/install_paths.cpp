#include "supervisor/exec/install_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace pillbox {
namespace {

std::filesystem::path self_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

std::string first_existing(const char* env, std::initializer_list<std::filesystem::path> candidates) {
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') return v;
  for (const auto& c : candidates) {
    if (::access(c.c_str(), R_OK) == 0) return c.string();
  }
  return {};
}

}  // namespace

std::string find_sandbox_binary() {
  const auto dir = self_dir();
  std::string found = first_existing("PILLBOX_SANDBOX", {dir / "pillbox-sandbox", dir / "../libexec/pillbox/pillbox-sandbox"});
  return found.empty() ? (dir / "pillbox-sandbox").string() : found;
}

std::string sandbox_binary_or_found(const std::string& chosen) {
  return chosen.empty() ? find_sandbox_binary() : chosen;
}

std::string find_crash_library() {
  const auto dir = self_dir();
  const std::string found =
      first_existing("PILLBOX_CRASH_LIB", {dir / "libpillbox-crash.so", dir / "../lib/pillbox/libpillbox-crash.so"});
  if (found.empty()) return {};
  std::error_code ec;
  const auto canonical = std::filesystem::canonical(found, ec);
  return ec ? found : canonical.string();
}

}  // namespace pillbox
