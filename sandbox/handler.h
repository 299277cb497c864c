#pragma once
// In-process handlers: code that runs inside a confined child, once per task,
// on the payload. A handler is prepared once in the zygote (before any fork:
// compile the pattern, load the plugin, warm the library) and then run in each
// child after confinement, so everything `run` touches must work under the
// seccomp allowlist of the policy.
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "shared/status.h"

namespace pillbox::sandbox {

enum class HandlerStatus {
  kOk,
  kError,        // the input was rejected cleanly: `message` says why
  kOutputLimit,  // the result would exceed `max_output` bytes
};

struct HandlerResult {
  HandlerStatus status = HandlerStatus::kOk;
  std::string output;   // the result; any bytes
  std::string message;  // for kError
};

using HandlerArgs = std::map<std::string, std::string>;

class Handler {
 public:
  virtual ~Handler() = default;
  // Runs in the confined child. May throw std::bad_alloc (reported as `oom`)
  // or any std::exception (reported as `handler-error` with its what()).
  virtual HandlerResult run(std::string_view payload, std::size_t max_output) = 0;
};

// Creates and prepares a built-in handler ("echo", "regex", "pdf-text",
// "inflate") or a plugin ("plugin:/path/to/lib.so"). Errors name the handler
// and say what to do ("unknown handler 'x' (known: echo, regex, ...)").
Expected<std::unique_ptr<Handler>> make_handler(const std::string& name, const HandlerArgs& args);

// Names of the built-in handlers, for messages and `pillbox doctor`.
const char* builtin_handler_names();

// Factories of the built-ins, one per file in sandbox/handlers/.
Expected<std::unique_ptr<Handler>> make_echo_handler(const HandlerArgs& args);
Expected<std::unique_ptr<Handler>> make_regex_handler(const HandlerArgs& args);
Expected<std::unique_ptr<Handler>> make_pdf_text_handler(const HandlerArgs& args);
Expected<std::unique_ptr<Handler>> make_inflate_handler(const HandlerArgs& args);
Expected<std::unique_ptr<Handler>> make_plugin_handler(const std::string& path, const HandlerArgs& args);

}  // namespace pillbox::sandbox
