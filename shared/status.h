#pragma once
// Status values instead of exceptions across module boundaries (LevelDB style).
// `Status` is ok or an error message; `Expected<T>` is a value or an error.
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace pillbox {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string empty;
    return message_ ? *message_ : empty;
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// Tag type so `return Error{"..."}` reads naturally in functions returning Expected<T>.
struct Error {
  std::string message;
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
  Status status() const { return has_value() ? Status::ok() : Status::error(error()); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace pillbox
