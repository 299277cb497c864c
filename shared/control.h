#pragma once
// The control channel between the supervisor and a zygote (a pair of pipes
// set up by Boost.Process), and the bootstrap pipe of a spawned child.
// Messages are length-prefixed msgpack: u32 big-endian length, then
// [version, type, body]. The zygote is trusted code (it never runs a
// payload), yet the supervisor still decodes strictly and caps sizes.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/child_config.h"
#include "shared/status.h"

namespace pillbox {

inline constexpr std::uint32_t kControlVersion = 1;

// Opens the message of a setup error caused by the user's configuration
// (unknown handler, bad --arg, plugin that fails to load) rather than by the
// host, for people to read. Programs tell such errors apart by their
// ErrorCode::kConfig: in a kFailed message, or by --check's exit code.
inline constexpr std::string_view kConfigErrorPrefix = "invalid handler configuration: ";

// Exit codes of `pillbox-sandbox --check` (spawn mode's check of a
// configuration before the run; the reason is on its stderr).
inline constexpr int kCheckExitSetupFailed = 3;    // the host cannot set up what the config asks
inline constexpr int kCheckExitConfigInvalid = 2;  // the config itself is wrong (ErrorCode::kConfig)

enum class ControlType : std::uint8_t {
  kConfig = 1,      // supervisor -> zygote: ChildConfig
  kReady = 2,       // zygote -> supervisor: ZygoteReady
  kFailed = 3,      // zygote -> supervisor: setup failed (message, error code)
  kFork = 4,        // supervisor -> zygote: TaskTicket
  kForked = 5,      // zygote -> supervisor: seq, pid
  kForkFailed = 6,  // zygote -> supervisor: seq, message
  kExited = 7,      // zygote -> supervisor: ExitReport
  kKill = 8,        // supervisor -> zygote: SIGKILL a task's process group (pid as the zygote sees it)
};

struct ZygoteReady {
  std::int64_t pid = 0;
  std::vector<std::string> isolation;  // what the zygote achieved ("netns", "ipcns", ...)
  std::vector<std::string> warnings;   // what it could not do and why
};

// Everything the parent of a child collects when it exits.
struct ExitReport {
  std::uint64_t seq = 0;
  std::int64_t pid = 0;
  std::int32_t wait_status = 0;        // as from wait4(2)
  std::uint64_t utime_us = 0;
  std::uint64_t stime_us = 0;
  std::uint64_t max_rss_kb = 0;
  std::string crash;                   // raw crash-pipe contents (hostile; capped)
  std::string stdout_data;             // exec mode: stdout, at most output cap + 1 bytes
  std::uint64_t stdout_size = 0;       // exec mode: the full size written
  std::string stderr_tail;             // exec mode: last bytes of stderr
  // What the kernel said (shared/seccomp_notify.h): whether a seccomp
  // listener watched the task, and the first syscall it denied (-1: none).
  bool seccomp_watched = false;
  std::int32_t violation_nr = -1;
  std::uint32_t violation_arch = 0;
  // The zygote made the task's slot a new private /tmp namespace after this
  // task, because the child could not empty the old one before its payload.
  bool slot_renewed = false;
  // Exec mode, zygote: whether the task read its payload, by the kernel's
  // word: the payload's file (the memory file the zygote made, or the file
  // in the payload dir) had its access time set to 0 once written, and a
  // read sets it (issue 26, point 4). 1 read, 0 never read, -1 unknown
  // (spawn mode, handlers, the file gone).
  std::int32_t payload_read = -1;
  // The size of that file then: less than the payload's when the child died
  // writing it (a payload too large for the memory limit, say): then it
  // never reached the command, and "unread" would say nothing.
  std::uint64_t payload_file_size = 0;
};

struct ControlMessage {
  ControlType type = ControlType::kConfig;
  ChildConfig config;       // kConfig
  ZygoteReady ready;        // kReady
  TaskTicket ticket;        // kFork
  std::uint64_t seq = 0;    // kForked, kForkFailed
  std::int64_t pid = 0;     // kForked, kKill
  std::string message;      // kFailed, kForkFailed
  ErrorCode error_code = ErrorCode::kSetup;  // kFailed: whose mistake (a bad handler configuration, or the host)
  ExitReport exit;          // kExited
};

// Encoded message including its length prefix.
std::string encode_control(const ControlMessage& message);
Expected<ControlMessage> decode_control(std::string_view body, std::size_t max_bytes);

// Accumulates bytes read from a pipe and yields complete messages.
class ControlReader {
 public:
  explicit ControlReader(std::size_t max_message_bytes) : max_(max_message_bytes) {}
  // Reads what is available from a non-blocking fd. Returns false on EOF or
  // error (then `error()` says which).
  bool read_from(int fd);
  // Next complete message, if any; an oversized or malformed one is an error.
  std::optional<Expected<ControlMessage>> next();
  const std::string& error() const { return error_; }

 private:
  std::size_t max_;
  std::string buf_;
  std::size_t pos_ = 0;
  std::string error_;
};

// Writes all of `bytes` to a (blocking) fd, retrying on EINTR.
Status write_all(int fd, std::string_view bytes);
// Reads exactly one message from a blocking fd (the bootstrap pipe of a spawned child).
Expected<ControlMessage> read_control_blocking(int fd, std::size_t max_bytes);

}  // namespace pillbox
