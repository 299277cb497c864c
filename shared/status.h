#pragma once
// Status values instead of exceptions across module boundaries (LevelDB style).
// `Status` is ok or an error; `Expected<T>` is a value or an error. An error
// is a message for people and a code for programs: whoever reports it (the
// CLI's exit code) tells errors apart by the code, never by the message.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace pillbox {

// The kinds of failure the CLI reports differently (supervisor/cli/exit_code.h).
// The values travel between processes (shared/control.h): never renumber.
enum class ErrorCode : std::uint8_t {
  kSetup = 0,   // the host, the sandbox or the store failed; also what nobody classified
  kUsage = 1,   // what was asked for cannot be done as asked (no such record, a payload
                // that no longer fails the same way)
  kConfig = 2,  // the handler configuration is the user's mistake (unknown handler, bad
                // --arg, a plugin that fails to load), found where the handler is loaded
};

// Tag type so `return Error{"..."}` reads naturally in functions returning Expected<T>.
struct Error {
  std::string message;
  ErrorCode code = ErrorCode::kSetup;
  static Error usage(std::string message) { return Error{std::move(message), ErrorCode::kUsage}; }
};

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message, ErrorCode code = ErrorCode::kSetup) {
    return Status(Error{std::move(message), code});
  }

  bool is_ok() const { return !error_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string empty;
    return error_ ? error_->message : empty;
  }
  // kSetup when ok (there is no error to classify).
  ErrorCode code() const { return error_ ? error_->code : ErrorCode::kSetup; }

 private:
  explicit Status(Error error) : error_(std::move(error)) {}
  std::optional<Error> error_;
};

template <class T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Expected(Error error) : v_(std::move(error)) {}        // NOLINT: implicit by design

  bool has_value() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const std::string& error() const { return std::get<Error>(v_).message; }
  ErrorCode error_code() const { return std::get<Error>(v_).code; }
  Status status() const { return has_value() ? Status::ok() : Status::error(error(), error_code()); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace pillbox
