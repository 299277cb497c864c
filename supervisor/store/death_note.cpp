#include "supervisor/store/death_note.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "supervisor/io/regular_file.h"

namespace pillbox {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS};

// Prepared when armed, so the handler only reads them.
int g_notes_dir = -1;
char g_note_name[64];
volatile sig_atomic_t g_armed = 0;
struct sigaction g_previous[sizeof kFatalSignals / sizeof kFatalSignals[0]];

std::size_t index_of(int sig) {
  for (std::size_t i = 0; i < sizeof kFatalSignals / sizeof kFatalSignals[0]; ++i) {
    if (kFatalSignals[i] == sig) return i;
  }
  return 0;
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  if (g_armed) {
    g_armed = 0;  // one note, even if writing it faults
    const int fd = ::openat(g_notes_dir, g_note_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      const char* abbrev = sigabbrev_np(sig);
      (void)!::write(fd, "SIG", 3);
      if (abbrev != nullptr) (void)!::write(fd, abbrev, ::strlen(abbrev));
      (void)!::write(fd, "\n", 1);
      ::close(fd);
    }
  }
  // Chain to what was installed before (a sanitizer's report), else the
  // default action.
  const struct sigaction& previous = g_previous[index_of(sig)];
  ::sigaction(sig, &previous, nullptr);
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    previous.sa_handler(sig);
    return;
  }
  // A fault returns to the faulting instruction and faults again, now with
  // the default action; a raised signal (abort) is raised again.
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

}  // namespace

Status arm_death_note(const std::string& store_dir, std::int64_t run_id) {
  const std::string dir = store_dir + "/deaths";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::error("cannot create " + dir + ": " + std::strerror(errno));
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot open " + dir + ": " + std::strerror(errno));
  g_armed = 0;
  if (g_notes_dir >= 0) ::close(g_notes_dir);
  g_notes_dir = fd;
  std::snprintf(g_note_name, sizeof g_note_name, "run-%lld", static_cast<long long>(run_id));
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigfillset(&sa.sa_mask);
  for (std::size_t i = 0; i < sizeof kFatalSignals / sizeof kFatalSignals[0]; ++i) {
    struct sigaction current {};
    ::sigaction(kFatalSignals[i], nullptr, &current);
    if (current.sa_sigaction != on_fatal_signal) g_previous[i] = current;  // not ourselves, when re-armed
    ::sigaction(kFatalSignals[i], &sa, nullptr);
  }
  g_armed = 1;
  return Status::ok();
}

void disarm_death_note() { g_armed = 0; }

std::vector<DeathNote> read_death_notes(const std::string& store_dir) {
  std::vector<DeathNote> notes;
  const std::string dir = store_dir + "/deaths";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return notes;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("run-", 0) != 0) continue;
    char* end = nullptr;
    const long long id = std::strtoll(name.c_str() + 4, &end, 10);
    if (end == name.c_str() + 4 || *end != '\0' || id <= 0) continue;
    auto text = read_regular_file_at(AT_FDCWD, dir + "/" + name, O_NOFOLLOW, 64);
    if (!text) continue;
    std::string cause = *text;
    while (!cause.empty() && (cause.back() == '\n' || cause.back() == '\r')) cause.pop_back();
    if (cause.rfind("SIG", 0) != 0 || cause.size() > 16) continue;
    notes.push_back({id, cause, dir + "/" + name});
  }
  ::closedir(d);
  return notes;
}

}  // namespace pillbox
