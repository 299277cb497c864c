#pragma once
// Where pillbox's helpers sit relative to the programs that look for them.
//
// Two layouts, both found from the running executable (/proc/self/exe), so
// that neither a build tree nor an install prefix is baked in:
//   - a build tree: pillbox, pillbox-sandbox and the libraries side by side;
//   - an installed tree (`cmake --install BUILD --prefix P`): P/bin/pillbox,
//     P/libexec/pillbox/pillbox-sandbox, P/lib/pillbox/lib*.so (the
//     directories are the GNUInstallDirs ones chosen when pillbox was
//     configured; CMakeLists.txt passes their relative positions here).
#include <filesystem>
#include <vector>

namespace pillbox::layout {

inline constexpr const char* kSandboxName = "pillbox-sandbox";
inline constexpr const char* kCrashLibraryName = "libpillbox-crash.so";
inline constexpr const char* kPdfTextModuleName = "libpillbox-pdf-text.so";

// The directory of the running executable; empty when /proc/self/exe cannot
// be read (no /proc): then nothing is found, and the caller says so.
std::filesystem::path running_executable_dir();

// Where the sandbox binary may be, given the directory that holds `pillbox`:
// the build tree's place first, then the installed tree's.
std::vector<std::filesystem::path> sandbox_candidates(const std::filesystem::path& pillbox_dir);
// The same for the crash library that exec-mode programs preload.
std::vector<std::filesystem::path> crash_library_candidates(const std::filesystem::path& pillbox_dir);
// The same for the pdf-text module, given the directory that holds
// pillbox-sandbox (the zygote loads it, from wherever the sandbox binary is).
std::vector<std::filesystem::path> pdf_text_candidates(const std::filesystem::path& sandbox_dir);

}  // namespace pillbox::layout
