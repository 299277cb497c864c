#include "sandbox/crash/crash_capture.h"

#include <link.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace pillbox::crash {
namespace {

constexpr int kMaxModules = 512;
constexpr int kMaxPath = 400;
constexpr int kMaxFrames = 64;

struct Module {
  std::uintptr_t start;
  std::uintptr_t end;
  std::uintptr_t bias;
  char path[kMaxPath];
};

Module g_modules[kMaxModules];
int g_module_count = 0;
int g_report_fd = -1;
std::atomic<int> g_in_handler{0};
alignas(16) char g_alt_stack[128 * 1024];
char g_report[32 * 1024];

// --- snapshot of loaded modules (runs in prepare, may allocate)

int add_module(dl_phdr_info* info, size_t, void*) {
  if (g_module_count >= kMaxModules) return 1;
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const std::uintptr_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  if (hi == 0) return 0;
  Module& m = g_modules[g_module_count];
  m.start = lo;
  m.end = hi;
  m.bias = info->dlpi_addr;
  const char* name = info->dlpi_name;
  if (name == nullptr || name[0] == '\0') {
    // The main program has no name here; /proc/self/exe is its real path.
    const ssize_t n = readlink("/proc/self/exe", m.path, kMaxPath - 1);
    m.path[n > 0 ? n : 0] = '\0';
  } else {
    std::strncpy(m.path, name, kMaxPath - 1);
    m.path[kMaxPath - 1] = '\0';
  }
  ++g_module_count;
  return 0;
}

// --- async-signal-safe formatting into g_report

struct Writer {
  char* p = g_report;
  char* end = g_report + sizeof g_report;
  void str(const char* s) {
    while (*s && p < end) *p++ = *s++;
  }
  void path(const char* s) {
    // The parser rejects control characters; never emit them.
    for (; *s && p < end; ++s) {
      const auto c = static_cast<unsigned char>(*s);
      *p++ = (c < 0x20 || c == 0x7f) ? '?' : *s;
    }
  }
  void dec(long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    do {
      tmp[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u && n < 23);
    if (v < 0 && p < end) *p++ = '-';
    while (n && p < end) *p++ = tmp[--n];
  }
  void hex(std::uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    int n = 0;
    do {
      tmp[n++] = digits[v & 15];
      v >>= 4;
    } while (v && n < 16);
    str("0x");
    while (n && p < end) *p++ = tmp[--n];
  }
  void line(const char* key, long long v) { str(key); str(" "); dec(v); str("\n"); }
  void line_hex(const char* key, std::uint64_t v) { str(key); str(" "); hex(v); str("\n"); }
};

void write_frame(Writer& w, std::uintptr_t pc) {
  for (int i = 0; i < g_module_count; ++i) {
    const Module& m = g_modules[i];
    if (pc >= m.start && pc < m.end) {
      w.str("frame ");
      w.path(m.path);
      w.str(" ");
      w.hex(pc - m.bias);
      w.str("\n");
      return;
    }
  }
  w.str("frame  ");  // unknown module: empty path, absolute pc
  w.hex(pc);
  w.str("\n");
}

void write_all(const char* data, std::size_t len) {
  while (len > 0) {
    const ssize_t n = write(g_report_fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // full or closed pipe: the report is best effort
    data += n;
    len -= static_cast<std::size_t>(n);
  }
}

// The frames above the caller, innermost first, as glibc's backtrace(3)
// records them (same stop rules, so fingerprints do not change), but with
// the unwinder this library is linked with: backtrace(3) would dlopen
// libgcc_s.so.1 in every exec'd program (see CMakeLists.txt).
struct Trace {
  void** frames;
  int size;
  int count;
  _Unwind_Word cfa;
};

_Unwind_Reason_Code record_frame(_Unwind_Context* context, void* arg) {
  auto* t = static_cast<Trace*>(arg);
  if (t->count >= 0) {  // the first call is in collect_frames itself: skipped
    t->frames[t->count] = reinterpret_cast<void*>(_Unwind_GetIP(context));
    // A frame that repeats the previous one at the same CFA makes no progress.
    const _Unwind_Word cfa = _Unwind_GetCFA(context);
    if (t->count > 0 && t->frames[t->count - 1] == t->frames[t->count] && cfa == t->cfa) return _URC_END_OF_STACK;
    t->cfa = cfa;
  }
  if (++t->count == t->size) return _URC_END_OF_STACK;
  return _URC_NO_REASON;
}

__attribute__((noinline)) int collect_frames(void** frames, int size) {
  Trace t{frames, size, -1, 0};
  if (size >= 1) _Unwind_Backtrace(record_frame, &t);
  // The unwinder reports a null pc above _start.
  if (t.count > 1 && frames[t.count - 1] == nullptr) --t.count;
  return t.count > 0 ? t.count : 0;
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (g_in_handler.exchange(1) != 0) {
    // Another thread is already reporting; it will take the process down.
    for (;;) pause();
  }
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  const std::uintptr_t pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const std::uintptr_t sp = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  const std::uintptr_t pc = uc->uc_mcontext.pc;
  const std::uintptr_t sp = uc->uc_mcontext.sp;
#else
  const std::uintptr_t pc = 0, sp = 0;
#endif
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  // A fault next to the stack pointer is the stack guard being hit: just
  // below it (a push or call), or just above it (a store into the frame that
  // `sub rsp` just allocated past the end of the stack).
  const bool near_sp = addr >= sp ? addr - sp < 65536 : sp - addr < (1u << 20);
  const bool stack_fault = sig == SIGSEGV && info->si_code > 0 && addr != 0 && near_sp;

  Writer w;
  w.str("pillbox-crash 1\n");
  w.line("pid", syscall(SYS_getpid));
  w.line("signal", sig);
  w.line("code", info->si_code);
  w.line_hex("addr", addr);
  w.line_hex("pc", pc);
  w.line_hex("sp", sp);
  // Only a seccomp trap names a syscall; a SIGSYS raised by kill(2) does not.
  constexpr int kSysSeccomp = 1;  // SYS_SECCOMP (asm-generic/siginfo.h; glibc does not export it)
  const bool seccomp_trap = sig == SIGSYS && info->si_code == kSysSeccomp;
  w.line("syscall", seccomp_trap ? info->si_syscall : -1);
  w.line("arch", seccomp_trap ? static_cast<long long>(info->si_arch) : 0);
  w.line("stack_fault", stack_fault ? 1 : 0);

  // The unwinder walks through the signal trampoline into the interrupted
  // code; start the report at the interrupted pc.
  void* raw[kMaxFrames + 8];
  const int n = collect_frames(raw, kMaxFrames + 8);
  int first = -1;
  for (int i = 0; i < n; ++i) {
    if (reinterpret_cast<std::uintptr_t>(raw[i]) == pc) {
      first = i;
      break;
    }
  }
  if (first < 0) {
    write_frame(w, pc);  // e.g. a jump to a bad pc the unwinder cannot leave
  } else {
    for (int i = first; i < n && i - first < kMaxFrames; ++i) {
      write_frame(w, reinterpret_cast<std::uintptr_t>(raw[i]));
    }
  }
  w.str("end\n");
  write_all(g_report, static_cast<std::size_t>(w.p - g_report));

  // SA_RESETHAND restored the default action. Returning re-executes a
  // faulting instruction, which now kills the process with the same signal.
  // Signals that do not re-occur by themselves are raised again.
  if (seccomp_trap) {
#if defined(__x86_64__)
    // Retry the trapped syscall with its own arguments: the filter traps it
    // again and, with the default action, the kernel kills us with SIGSYS.
    const auto* g = uc->uc_mcontext.gregs;
    syscall(info->si_syscall, g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]);
#endif
    _exit(128 + SIGSYS);
  }
  if (info->si_code <= 0 || sig == SIGTRAP) {
    syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), sig);
  }
  errno = saved_errno;
}

}  // namespace

void prepare() {
  g_module_count = 0;
  dl_iterate_phdr(add_module, nullptr);
  void* warm[4];
  collect_frames(warm, 4);
}

void arm(int report_fd) {
  g_report_fd = report_fd;
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigfillset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) {
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace pillbox::crash
