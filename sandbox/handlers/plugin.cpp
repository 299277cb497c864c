// The plugin loader: a handler written against the C ABI in
// <pillbox/plugin.h>, loaded with dlopen in the zygote and run in each
// confined child like a built-in.
#include <dlfcn.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <vector>

#include "sandbox/handler.h"
#include "sandbox/include/pillbox/plugin.h"

namespace pillbox::sandbox {
namespace {

// What the plugin's io callbacks write to, reached through pillbox_io::opaque.
struct IoState {
  std::string output;
  std::size_t max_output = 0;
  bool overflowed = false;
  bool out_of_memory = false;  // an allocation failed inside a callback
  std::optional<std::string> failure;
};

// The callbacks are called from C: no exception may cross back into the
// plugin's frames, so an allocation failure is recorded and rethrown once
// `run` has returned.
int io_write(pillbox_io* io, const void* data, std::size_t len) {
  auto& state = *static_cast<IoState*>(io->opaque);
  if (state.overflowed || state.out_of_memory) return -1;
  if (len > state.max_output - state.output.size()) {
    state.overflowed = true;
    return -1;
  }
  try {
    state.output.append(static_cast<const char*>(data), len);
  } catch (const std::bad_alloc&) {
    state.out_of_memory = true;
    return -1;
  }
  return 0;
}

void io_fail(pillbox_io* io, const char* message) {
  auto& state = *static_cast<IoState*>(io->opaque);
  try {
    state.failure = message ? message : "";
  } catch (const std::bad_alloc&) {
    state.out_of_memory = true;
  }
}

// The library is never dlclose'd: the plugin's code and state must stay valid
// for as long as the process runs tasks.
class PluginHandler final : public Handler {
 public:
  PluginHandler(const pillbox_plugin* plugin, void* state) : plugin_(plugin), state_(state) {}

  HandlerResult run(std::string_view payload, std::size_t max_output) override {
    IoState io_state;
    io_state.max_output = max_output;
    pillbox_io io{reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), &io_state, io_write,
                  io_fail};
    const int rc = plugin_->run(state_, &io);
    if (io_state.out_of_memory) throw std::bad_alloc();
    if (io_state.overflowed) {
      return {HandlerStatus::kOutputLimit, {},
              std::string("plugin ") + plugin_->name + " wrote more than the cap of " +
                  std::to_string(max_output) + " bytes"};
    }
    if (rc != 0) {
      std::string message = io_state.failure && !io_state.failure->empty()
                                 ? std::move(*io_state.failure)
                                 : "plugin returned " + std::to_string(rc);
      return {HandlerStatus::kError, {}, std::move(message)};
    }
    return {HandlerStatus::kOk, std::move(io_state.output), {}};
  }

 private:
  const pillbox_plugin* plugin_;
  void* state_;
};

}  // namespace

Expected<std::unique_ptr<Handler>> make_plugin_handler(const std::string& path, const HandlerArgs& args) {
  // Children may run with another working directory: pin the path now.
  char resolved[PATH_MAX];
  if (!realpath(path.c_str(), resolved)) {
    return Error{"cannot load plugin " + path + ": " + std::strerror(errno)};
  }
  void* library = dlopen(resolved, RTLD_NOW | RTLD_LOCAL);
  if (!library) return Error{"cannot load plugin " + path + ": " + dlerror()};
  const auto fail = [&](std::string message) {
    dlclose(library);
    return Error{std::move(message)};
  };

  const auto entry = reinterpret_cast<pillbox_plugin_entry>(dlsym(library, PILLBOX_PLUGIN_ENTRY));
  if (!entry) {
    return fail("plugin " + path + " is not a pillbox plugin: it does not export the function " +
                PILLBOX_PLUGIN_ENTRY);
  }
  const pillbox_plugin* plugin = entry();
  if (!plugin) return fail("plugin " + path + ": " + PILLBOX_PLUGIN_ENTRY + "() returned NULL");
  if (plugin->abi_version != PILLBOX_PLUGIN_ABI_VERSION) {
    return fail("plugin " + path + " was built for plugin ABI version " + std::to_string(plugin->abi_version) +
                ", but this pillbox supports version " + std::to_string(PILLBOX_PLUGIN_ABI_VERSION));
  }
  if (!plugin->name || !plugin->run) {
    return fail("plugin " + path + " is incomplete: its pillbox_plugin needs a non-NULL name and run");
  }

  void* state = nullptr;
  if (plugin->init) {
    std::vector<const char*> keys;
    std::vector<const char*> values;
    for (const auto& [key, value] : args) {
      keys.push_back(key.c_str());
      values.push_back(value.c_str());
    }
    char error[1024] = "";
    const int rc = plugin->init(&state, keys.data(), values.data(), args.size(), error, sizeof error);
    if (rc != 0) {
      error[sizeof error - 1] = '\0';  // do not trust the plugin to terminate it
      return fail(std::string("plugin ") + plugin->name + " init failed: " +
                  (error[0] ? error : "returned " + std::to_string(rc)));
    }
  } else if (!args.empty()) {
    return fail(std::string("plugin ") + plugin->name + " does not take --arg '" + args.begin()->first +
                "' (it has no init)");
  }
  return std::unique_ptr<Handler>(std::make_unique<PluginHandler>(plugin, state));
}

}  // namespace pillbox::sandbox
