#pragma once
// A `pillbox` that runs as long as the test wants: its stdin, stdout and
// stderr on pipes the test holds (metrics_test.cpp, console_test.cpp).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

namespace e2e {

// pillbox with its stdin, stdout and stderr on pipes held by the test: it
// runs until the test closes its stdin (or it is killed with the test).
class LiveRun {
 public:
  explicit LiveRun(const std::vector<std::string>& args) {
    std::vector<std::string> argv_s{e2e::pillbox_binary()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    int in[2], out[2], err[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    in_ = in[1];
    out_ = ::fdopen(out[0], "r");
    err_ = ::fdopen(err[0], "r");
    REQUIRE(out_ != nullptr);
    REQUIRE(err_ != nullptr);
  }
  ~LiveRun() {
    if (pid_ > 0 && !reaped_) e2e::check_no_deleted_store_files(pid_);
    if (in_ >= 0) ::close(in_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) std::fclose(out_);
    if (err_ != nullptr) std::fclose(err_);
  }
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

  void write(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(in_, bytes.data() + done, bytes.size() - done);
      REQUIRE(n > 0);
      done += static_cast<std::size_t>(n);
    }
  }
  void signal(int sig) const {
    e2e::check_no_deleted_store_files(pid_);
    ::kill(pid_, sig);
  }
  pid_t pid() const { return pid_; }
  void close_stdin() {
    e2e::check_no_deleted_store_files(pid_);
    ::close(in_);
    in_ = -1;
  }
  // The next line of stdout or stderr (without its newline); nullopt at the end.
  std::optional<std::string> out_line() { return line_of(out_); }
  std::optional<std::string> err_line() {
    auto line = line_of(err_);
    if (line) err_seen_ += *line + "\n";
    return line;
  }
  const std::string& err_seen() const { return err_seen_; }
  // Its exit code, once it ended (what is left on stderr is read first).
  int wait() {
    while (err_line()) {
    }
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  static std::optional<std::string> line_of(std::FILE* f) {
    std::string line;
    for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) {
      if (c == '\n') return line;
      line += static_cast<char>(c);
    }
    if (line.empty()) return std::nullopt;
    return line;
  }
  pid_t pid_ = -1;
  bool reaped_ = false;
  int in_ = -1;
  std::FILE* out_ = nullptr;
  std::FILE* err_ = nullptr;
  std::string err_seen_;
};

}  // namespace e2e
