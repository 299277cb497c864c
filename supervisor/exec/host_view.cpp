#include "supervisor/exec/host_view.h"

#include <sys/stat.h>

#include <cctype>
#include <filesystem>
#include <string_view>

#include "shared/task_input.h"

namespace pillbox {
namespace {

constexpr std::string_view kWordStart = " \t\n;|&<>()'\"`=:";
constexpr std::string_view kWordEnd = " \t\n;|&<>()'\"`";

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

std::string normal(const std::string& path) { return std::filesystem::path(path).lexically_normal().string(); }

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

bool has_private_tmp(const Policy& policy) {
  return policy.isolation.filesystem == FilesystemMode::kReadOnly && policy.isolation.tmp_bytes > 0;
}

std::string private_dir_of(const std::string& path) {
  for (const char* dir : kPrivateDirs) {
    if (under(path, dir) && path != dir) return dir;
  }
  return "";
}

std::vector<std::string> absolute_words(const std::string& a) {
  std::vector<std::string> words;
  for (std::size_t at = a.find('/'); at != std::string::npos; at = a.find('/', at + 1)) {
    if (at > 0 && kWordStart.find(a[at - 1]) == std::string_view::npos) continue;
    // In quotes ('/srv/my tools/run'), a path may hold spaces: it ends at
    // the closing quote.
    const char quote = at > 0 && (a[at - 1] == '\'' || a[at - 1] == '"') ? a[at - 1] : '\0';
    const std::size_t closing = quote != '\0' ? a.find(quote, at) : std::string::npos;
    const std::size_t end = closing != std::string::npos ? closing : a.find_first_of(kWordEnd, at);
    words.push_back(a.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end;
  }
  return words;
}

bool bound_into_view(const ChildConfig& config, const std::string& path) {
  const Isolation& iso = config.policy.isolation;
  for (const auto* list : {&config.keep_visible, &iso.shared, &iso.writable}) {
    for (const std::string& bound : *list) {
      if (under(path, bound)) return true;
    }
  }
  return false;
}

std::string share_for(const std::string& hidden) {
  const std::string root = private_dir_of(hidden);
  std::string dir = is_dir(hidden) ? hidden : std::filesystem::path(hidden).parent_path().string();
  while (!dir.empty() && dir != root && !is_dir(dir)) dir = std::filesystem::path(dir).parent_path().string();
  return dir == root ? "" : dir;
}

Status check_host_view(const ChildConfig& config) {
  if (config.exec_payload_as_file && has_private_tmp(config.policy)) {
    // The payload's directory is a tmpfs of its own over whatever the host has
    // there (shared/task_input.h).
    const Isolation& iso = config.policy.isolation;
    for (const auto* list : {&config.keep_visible, &iso.shared, &iso.writable}) {
      for (const std::string& path : *list) {
        if (under(normal(path), std::string(kPayloadDir))) {
          return Status::error(path + " lies in " + std::string(kPayloadDir) +
                               ", where each task finds its payload's file and nothing of the host: move it elsewhere");
        }
      }
    }
  }
  for (const std::string& path : config.policy.isolation.shared) {
    if (!exists(path)) {
      return Status::error("the shared path " + path + " (--share, or `share =` in the policy) does not exist on this "
                           "host: share a directory or file that does");
    }
    for (const char* dir : kPrivateDirs) {
      if (normal(path) == dir || normal(path) == std::string(dir) + "/") {
        return Status::error("the shared path " + path + " is a directory each task gets as its own: share the "
                             "directories inside it that tasks need");
      }
    }
    // Bound later, by root, without following symlinks (private_tmp.cpp): a
    // symlink swapped in after the access check must not show tasks what
    // their uid may not reach. So the path must have none now either.
    std::error_code ec;
    const std::string real = std::filesystem::canonical(path, ec).string();
    if (ec || real != normal(path)) {
      return Status::error("the shared path " + path + " (--share, or `share =` in the policy) goes through a symlink" +
                           (ec ? std::string() : " (it is " + real + ")") + ": share the path it leads to");
    }
  }
  if (!config.exec_mode() || !has_private_tmp(config.policy)) return Status::ok();
  for (std::size_t i = 1; i < config.exec_argv.size(); ++i) {
    for (const std::string& word : absolute_words(config.exec_argv[i])) {
      if (has_replacement_string(word)) continue;  // the payload's file, or made from the key
      const std::string path = normal(word);
      if (path.starts_with(std::string(kPayloadDir) + "/")) continue;  // where the payload's file is
      const std::string root = private_dir_of(path);
      if (root.empty() || exists(path) || bound_into_view(config, path)) continue;
      const std::string host_dir = share_for(path);
      if (host_dir.empty() || bound_into_view(config, host_dir)) continue;
      return Status::error(
          "argument " + std::to_string(i) + " of the command names " + path + ", under " + root +
          ", which each task gets as its own empty directory (the policy's tmp): this host's " + host_dir +
          " is not in it, so the task would neither read nor write the host's " + path +
          "; to let tasks read the host's " + host_dir + ", add --share " + host_dir + "; to let them write it, "
          "--writable " + host_dir + "; if the command makes that path for itself, name one this host does not have");
    }
  }
  return Status::ok();
}

std::string hidden_host_path(const ChildConfig& config, const std::string& message) {
  if (!has_private_tmp(config.policy)) return "";
  // The way C (strerror), Python, Node, Java and Ruby word ENOENT.
  std::string lower = message;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("no such file or directory") == std::string::npos) return "";
  for (const std::string& word : absolute_words(message)) {
    std::string path = word;
    // "cat: /tmp/tt/data.txt: No such file or directory", "'/tmp/x'," and
    // "/tmp/x." in prose: what ends a path in a message is not part of it.
    while (!path.empty() && std::string_view(":,.;)]}'\"").find(path.back()) != std::string_view::npos) path.pop_back();
    if (path.empty()) continue;
    path = normal(path);
    // "/tmp/" and "/tmp/." are /tmp itself (lexically_normal keeps the '/'),
    // which every host has: not a file of the host the task could not see.
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    if (private_dir_of(path).empty() || bound_into_view(config, path) || !exists(path)) continue;
    return path;
  }
  return "";
}

std::string why_hidden(const std::string& hidden, const Outcome& failure) {
  return "a task could not see " + hidden + ", which this host has (" + std::string(to_string(failure.kind)) + " " +
         failure.fingerprint + ": " + failure.message.substr(0, failure.message.find('\n')) + "): under " +
         private_dir_of(hidden) + ", tasks see their own empty directory and only what is shared with them";
}

std::string hidden_host_path(const ChildConfig& config, const Outcome& failure) {
  return hidden_host_path(config, failure.message + "\n" + failure.stderr_tail);
}

}  // namespace pillbox
