// Finds and loads libpillbox-pdf-text.so, the module that holds the
// "pdf-text" handler and the poppler libraries it needs. Loaded in the zygote
// only when the handler is asked for, so that every other handler forks from
// a zygote without poppler's 22 libraries mapped (see pdf_text.cpp).
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "sandbox/handler.h"
#include "shared/install_layout.h"

namespace pillbox::sandbox {
namespace {

constexpr const char* kModuleName = layout::kPdfTextModuleName;
constexpr const char* kEntryPoint = "pillbox_pdf_text_make";

using EntryPoint = void (*)(const HandlerArgs&, Expected<std::unique_ptr<Handler>>&);

// $PILLBOX_PDF_TEXT_LIB, else next to this executable (a build tree), else
// the installed tree's lib/pillbox/ (shared/install_layout.h).
Expected<std::vector<std::filesystem::path>> module_candidates() {
  if (const char* v = std::getenv("PILLBOX_PDF_TEXT_LIB"); v != nullptr && *v != '\0') {
    // dlopen would search the library path for a bare name: not what was meant.
    if (v[0] != '/') return Error{"PILLBOX_PDF_TEXT_LIB must be an absolute path (it is '" + std::string(v) + "')"};
    return std::vector<std::filesystem::path>{v};
  }
  return layout::pdf_text_candidates(layout::running_executable_dir());
}

// Code loaded into a zygote that runs as root must be as trusted as the
// zygote's own binary: owned by root (or by us) and writable by nobody else.
std::string untrusted_reason(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) return "it is owned by uid " + std::to_string(st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "it is writable by group or others";
  return {};
}

}  // namespace

Expected<std::unique_ptr<Handler>> make_pdf_text_handler(const HandlerArgs& args) {
  const auto candidates = module_candidates();
  if (!candidates) return Error{candidates.error()};
  std::string looked;
  for (const std::filesystem::path& path : *candidates) {
    if (!looked.empty()) looked += ", ";
    looked += path.lexically_normal().string();
    if (::access(path.c_str(), R_OK) != 0) continue;
    if (const std::string why = untrusted_reason(path); !why.empty()) {
      return Error{"handler 'pdf-text': refusing to load " + path.string() + ": " + why};
    }
    // Never closed: the handler's code must stay mapped for every child.
    void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      return Error{"handler 'pdf-text': cannot load " + path.string() + ": " + ::dlerror() +
                   " (is poppler installed? tools/setup.sh installs it)"};
    }
    auto entry = reinterpret_cast<EntryPoint>(::dlsym(module, kEntryPoint));
    if (entry == nullptr) {
      return Error{"handler 'pdf-text': " + path.string() + " is not a pillbox pdf-text module (no " + kEntryPoint +
                   "); rebuild pillbox"};
    }
    Expected<std::unique_ptr<Handler>> handler = Error{"handler 'pdf-text': the module returned nothing"};
    entry(args, handler);
    return handler;
  }
  return Error{"handler 'pdf-text' needs " + std::string(kModuleName) + ", which is not installed (looked in: " +
               looked + "; set PILLBOX_PDF_TEXT_LIB to its path)"};
}

}  // namespace pillbox::sandbox
