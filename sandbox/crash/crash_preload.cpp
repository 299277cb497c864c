// libpillbox-crash.so: preloaded (LD_PRELOAD) into programs run in exec mode,
// so that their crashes are reported with frames like in-process handlers'.
// The sandbox runtime sets PILLBOX_CRASH_FD before exec; without it this
// library does nothing. Statically linked programs do not load it; their
// crashes are still classified by signal, only without frames.
#include <cstdlib>

#include "sandbox/crash/crash_capture.h"

namespace {

__attribute__((constructor)) void pillbox_crash_preload_init() {
  const char* fd_text = std::getenv("PILLBOX_CRASH_FD");
  if (fd_text == nullptr) return;
  char* end = nullptr;
  const long fd = std::strtol(fd_text, &end, 10);
  if (end == fd_text || *end != '\0' || fd < 3 || fd > 65535) return;
  pillbox::crash::prepare();
  pillbox::crash::arm(static_cast<int>(fd));
}

}  // namespace
