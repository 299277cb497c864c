#pragma once
// The supervisor <-> child wire: msgpack frames over a ZeroMQ DEALER/ROUTER
// pair on an ipc:// endpoint that serves one task at a time
// (supervisor/exec/wire_socket.h; docs/architecture.md, 'The wire').
//
// Every frame is a msgpack array: [version, type, task, secret, body...].
// The supervisor treats every byte from a child as hostile: decode_frame() checks
// the size cap, the exact shape of each frame type, the version, and leaves
// the task/secret comparison to the caller (TaskChannel), which knows them.
//
// Conversation of one task (-> child to supervisor, <- supervisor to child).
// The child connects while still root, confines itself completely, then:
//   -> HELLO{pid} | SETUP_FAILED{message}
//                  (sandbox-error is only believed here, before the payload)
//   <- TASK{payload}
//   -> RESULT{status, output, message}
//                  (in-process handlers; exec programs end by exiting; an exec
//                  runtime whose execve fails reports it, and the classifier
//                  makes it a sandbox-error: never the payload's fault)
// The child writes RESULT and exits; the bytes stay readable in the
// supervisor's socket after the child is gone, so nothing is lost in flight.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/status.h"

namespace pillbox {

inline constexpr std::uint32_t kWireVersion = 1;
inline constexpr std::size_t kSecretSize = 16;
using Secret = std::array<std::uint8_t, kSecretSize>;

// Bytes a frame may use beyond its payload/output (header, message, msgpack overhead).
inline constexpr std::size_t kFrameOverhead = 64 * 1024;
inline constexpr std::size_t kMaxMessageBytes = 16 * 1024;  // error messages in frames

enum class FrameType : std::uint8_t {
  kHello = 1,
  kSetupFailed = 2,
  kTask = 3,
  kResult = 4,
};

enum class ResultStatus : std::uint8_t {
  kOk = 0,
  kHandlerError = 1,
  kOutputLimit = 2,
  kOutOfMemory = 3,  // std::bad_alloc under RLIMIT_AS
  kExecFailed = 4,   // exec mode: execve failed before the program ran (not the payload's fault)
};

struct Frame {
  FrameType type = FrameType::kHello;
  std::uint64_t task = 0;
  Secret secret{};
  std::int64_t pid = 0;                          // kHello
  ResultStatus status = ResultStatus::kOk;       // kResult
  std::string data;                              // kTask: payload; kResult: output
  std::string message;                           // kSetupFailed, kResult
};

std::string_view to_string(FrameType type);

std::string encode_frame(const Frame& frame);

// Strict decode: the exact array shape for the frame type, the version, field
// types and sizes. `max_bytes` bounds the whole frame.
Expected<Frame> decode_frame(std::string_view bytes, std::size_t max_bytes);

// Constant-time comparison, so a hostile child cannot probe a secret byte by byte.
bool secrets_equal(const Secret& a, const Secret& b);

// A fresh secret from getrandom(2).
Secret random_secret();

}  // namespace pillbox
