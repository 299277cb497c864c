// The "echo" handler: the result is the payload itself. The baseline for
// measuring pillbox's own overhead and for testing the wire end to end.
#include "sandbox/handler.h"

namespace pillbox::handlers {

// Kept out of line so a crash here is named in the fingerprint like any other handler's.
[[gnu::noinline]] std::string echo_payload(std::string_view payload) { return std::string(payload); }

}  // namespace pillbox::handlers

namespace pillbox::sandbox {
namespace {

class EchoHandler final : public Handler {
 public:
  HandlerResult run(std::string_view payload, std::size_t max_output) override {
    if (payload.size() > max_output) {
      return {HandlerStatus::kOutputLimit, {},
              "echo output of " + std::to_string(payload.size()) + " bytes exceeds the cap of " +
                  std::to_string(max_output)};
    }
    return {HandlerStatus::kOk, handlers::echo_payload(payload), {}};
  }
};

}  // namespace

Expected<std::unique_ptr<Handler>> make_echo_handler(const HandlerArgs& args) {
  if (!args.empty()) {
    return Error{"handler 'echo' does not take --arg '" + args.begin()->first + "' (it takes none)"};
  }
  return std::unique_ptr<Handler>(std::make_unique<EchoHandler>());
}

}  // namespace pillbox::sandbox
