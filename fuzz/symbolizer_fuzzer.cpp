// libFuzzer harness: the supervisor's ELF symbolizer (supervisor/classify/symbolizer.cpp).
// A crashing child names the modules of its frames, and the supervisor reads
// their symbol tables: any file a child can name and that passes the
// symbolizer's ownership check (root's or ours, writable by nobody else) is
// read, so a malformed ELF there (a corrupt library, a truncated binary being
// replaced) must not crash, hang or bloat the supervisor.
//
// Input: 8 bytes, little-endian, an offset to look up; the rest is the ELF
// file. It is written to a memfd (0600, ours) that the symbolizer opens by
// /proc/self/fd/N, as it would open a module path.
// Properties checked: the same lookup gives the same name twice (the second
// from the module cache); names hold no NUL byte; symbolize() gives one frame
// per raw frame, with the faulting pc's name equal to function_at's, and a
// missing module gives no name.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "supervisor/classify/symbolizer.h"

namespace {

// One memfd for the whole run, rewritten per input.
int module_fd() {
  static const int fd = [] {
    const int f = ::memfd_create("pillbox-symbolizer-fuzz", MFD_CLOEXEC);
    // memfds are created 0777; the symbolizer refuses group/other-writable files.
    if (f < 0 || ::fchmod(f, 0600) != 0) {
      std::perror("symbolizer fuzzer: memfd");
      std::abort();
    }
    return f;
  }();
  return fd;
}

void write_module(const std::uint8_t* data, std::size_t size) {
  const int fd = module_fd();
  FUZZ_CHECK(::ftruncate(fd, 0) == 0);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::uint64_t offset = 0;
  const std::size_t head = size < sizeof offset ? size : sizeof offset;
  std::memcpy(&offset, data, head);
  write_module(data + head, size - head);
  const std::string path = "/proc/self/fd/" + std::to_string(module_fd());

  // A fresh symbolizer per input: its cache is keyed by path, and the path
  // stays the same while the bytes behind it change.
  pillbox::Symbolizer symbolizer;
  for (const std::uint64_t delta : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{16}, std::uint64_t{4096},
                                    ~std::uint64_t{0}}) {
    const std::uint64_t at = offset + delta;
    for (const bool return_address : {false, true}) {
      const std::string first = symbolizer.function_at(path, at, return_address);
      const std::string again = symbolizer.function_at(path, at, return_address);
      FUZZ_CHECK(first == again);
      FUZZ_CHECK(first.find('\0') == std::string::npos);
    }
  }
  const std::vector<pillbox::RawFrame> raw = {
      {path, offset}, {path, offset + 1}, {"/nonexistent/pillbox-fuzz-module.so", offset}, {"", offset}};
  const auto frames = symbolizer.symbolize(raw);
  FUZZ_CHECK(frames.size() == raw.size());
  FUZZ_CHECK(frames[0].function == symbolizer.function_at(path, offset, false));
  FUZZ_CHECK(frames[1].function == symbolizer.function_at(path, offset + 1, true));
  FUZZ_CHECK(frames[2].function.empty());
  FUZZ_CHECK(frames[3].function.empty());
  return 0;
}
