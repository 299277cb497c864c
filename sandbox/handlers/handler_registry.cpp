// Maps a handler name from the command line to the factory that prepares it.
#include <string_view>

#include "sandbox/handler.h"

namespace pillbox::sandbox {
namespace {

constexpr std::string_view kPluginPrefix = "plugin:";

struct BuiltinHandler {
  std::string_view name;
  Expected<std::unique_ptr<Handler>> (*make)(const HandlerArgs& args);
};

constexpr BuiltinHandler kBuiltins[] = {
    {"echo", make_echo_handler},
    {"regex", make_regex_handler},
    {"pdf-text", make_pdf_text_handler},
    {"inflate", make_inflate_handler},
};

}  // namespace

const char* builtin_handler_names() {
  static const std::string names = [] {
    std::string joined;
    for (const BuiltinHandler& builtin : kBuiltins) {
      if (!joined.empty()) joined += ", ";
      joined += builtin.name;
    }
    return joined;
  }();
  return names.c_str();
}

Expected<std::unique_ptr<Handler>> make_handler(const std::string& name, const HandlerArgs& args) {
  if (name.starts_with(kPluginPrefix)) {
    const std::string path = name.substr(kPluginPrefix.size());
    if (path.empty()) return Error{"handler 'plugin:' needs a path: plugin:/path/to/handler.so"};
    return make_plugin_handler(path, args);
  }
  for (const BuiltinHandler& builtin : kBuiltins) {
    if (builtin.name == name) return builtin.make(args);
  }
  return Error{"unknown handler '" + name + "' (built-in: " + builtin_handler_names() +
               "; or plugin:/path/to/handler.so)"};
}

}  // namespace pillbox::sandbox
