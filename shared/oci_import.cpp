#include "shared/oci_import.h"

#include <seccomp.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace pillbox {
namespace {

using nlohmann::json;

// How profiles spell this machine's architecture: Docker uses Go names in
// `includes.arches`, the OCI spec uses libseccomp's constant names.
struct ArchSpellings {
  std::uint32_t token;
  std::string_view names[3];
};
constexpr ArchSpellings kArchSpellings[] = {
    {SCMP_ARCH_X86_64, {"amd64", "x86_64", "SCMP_ARCH_X86_64"}},
    {SCMP_ARCH_AARCH64, {"arm64", "aarch64", "SCMP_ARCH_AARCH64"}},
};

bool names_native_arch(std::string_view arch) {
  const std::uint32_t native = seccomp_arch_native();
  for (const ArchSpellings& a : kArchSpellings) {
    if (a.token != native) continue;
    return std::find(std::begin(a.names), std::end(a.names), arch) != std::end(a.names);
  }
  return false;
}

// Profiles list syscalls of every architecture and kernel; only the ones that
// exist here can go into a filter (negative numbers are libseccomp's
// placeholders for syscalls of other architectures).
bool exists_on_native_arch(const std::string& name) {
  // libseccomp reads a C string: "read\u0000x" (JSON may escape a NUL) would
  // resolve as read, though it is no syscall's name (fuzz/oci_import_fuzzer.cpp).
  if (name.find('\0') != std::string::npos) return false;
  return seccomp_syscall_resolve_name(name.c_str()) >= 0;
}

bool is_absent(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null();
}

// Walks one profile. Wrong field types are errors rather than skips: a
// profile we misread would silently allow or deny the wrong syscalls.
class Importer {
 public:
  explicit Importer(std::string_view origin) : origin_(origin) {}

  Expected<std::vector<std::string>> run(const json& root) {
    if (!root.is_object()) return fail("top level must be a JSON object (a seccomp profile)");
    const json* profile = &root;
    if (is_absent(root, "defaultAction")) {
      // An OCI runtime config.json carries the profile at linux.seccomp.
      auto linux_it = root.find("linux");
      if (linux_it == root.end() || !linux_it->is_object() || is_absent(*linux_it, "seccomp")) {
        return fail("no 'defaultAction' and no 'linux.seccomp'; is this a seccomp profile?");
      }
      profile = &(*linux_it)["seccomp"];
      path_ = "linux.seccomp.";
      if (!profile->is_object() || is_absent(*profile, "defaultAction")) {
        return fail(path_ + "defaultAction is missing");
      }
    }
    const json& default_action = (*profile)["defaultAction"];
    if (!default_action.is_string()) return fail(path_ + "defaultAction must be a string");
    const auto action = default_action.get<std::string>();
    if (action == "SCMP_ACT_ALLOW" || action == "SCMP_ACT_LOG") {
      return fail("defaultAction " + action +
                  " makes this a denylist profile; denylist profiles cannot be imported, "
                  "pillbox needs an allowlist");
    }
    if (is_absent(*profile, "syscalls")) return std::vector<std::string>{};
    const json& syscalls = (*profile)["syscalls"];
    if (!syscalls.is_array()) return fail(path_ + "syscalls must be an array");

    std::vector<std::string> allowed;
    for (std::size_t i = 0; i < syscalls.size(); ++i) {
      Status st = add_entry(syscalls[i], path_ + "syscalls[" + std::to_string(i) + "]", allowed);
      if (!st) return Error{st.message()};
    }
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    return allowed;
  }

 private:
  Error fail(const std::string& message) const {
    return Error{std::string(origin_) + ": " + message};
  }
  Status status(const std::string& message) const {
    return Status::error(std::string(origin_) + ": " + message);
  }

  Status add_entry(const json& entry, const std::string& where, std::vector<std::string>& allowed) const {
    if (!entry.is_object()) return status(where + " must be an object");
    if (is_absent(entry, "action") || !entry["action"].is_string()) {
      return status(where + ".action must be a string such as \"SCMP_ACT_ALLOW\"");
    }
    std::vector<std::string> names;
    if (!is_absent(entry, "names")) {
      Status st = read_strings(entry["names"], where + ".names", names);
      if (!st) return st;
    }
    if (!is_absent(entry, "name")) {  // legacy single-name form
      if (!entry["name"].is_string()) return status(where + ".name must be a string");
      names.push_back(entry["name"].get<std::string>());
    }

    bool applies = entry["action"].get<std::string>() == "SCMP_ACT_ALLOW";
    // Argument conditions cannot be expressed in a policy's allow list, and
    // allowing the syscall without them would widen the profile.
    if (!is_absent(entry, "args")) {
      if (!entry["args"].is_array()) return status(where + ".args must be an array");
      if (!entry["args"].empty()) applies = false;
    }
    if (!is_absent(entry, "includes")) {
      const json& includes = entry["includes"];
      if (!includes.is_object()) return status(where + ".includes must be an object");
      std::vector<std::string> caps, arches;
      Status st = read_optional_strings(includes, "caps", where + ".includes", caps);
      if (!st) return st;
      st = read_optional_strings(includes, "arches", where + ".includes", arches);
      if (!st) return st;
      // pillbox children run without capabilities; minKernel is not checked.
      if (!caps.empty()) applies = false;
      if (!arches.empty() && std::none_of(arches.begin(), arches.end(), names_native_arch)) {
        applies = false;
      }
    }
    if (!is_absent(entry, "excludes")) {
      const json& excludes = entry["excludes"];
      if (!excludes.is_object()) return status(where + ".excludes must be an object");
      std::vector<std::string> arches;
      Status st = read_optional_strings(excludes, "arches", where + ".excludes", arches);
      if (!st) return st;
      // excludes.caps withdraws the entry from holders of those capabilities,
      // which pillbox children never are, so it does not matter here.
      if (std::any_of(arches.begin(), arches.end(), names_native_arch)) applies = false;
    }
    if (!applies) return Status::ok();
    for (std::string& name : names) {
      if (exists_on_native_arch(name)) allowed.push_back(std::move(name));
    }
    return Status::ok();
  }

  Status read_strings(const json& value, const std::string& where, std::vector<std::string>& out) const {
    if (!value.is_array()) return status(where + " must be an array of strings");
    for (const json& item : value) {
      if (!item.is_string()) return status(where + " must be an array of strings");
      out.push_back(item.get<std::string>());
    }
    return Status::ok();
  }

  Status read_optional_strings(const json& object, const char* key, const std::string& where,
                               std::vector<std::string>& out) const {
    if (is_absent(object, key)) return Status::ok();
    return read_strings(object[key], where + "." + key, out);
  }

  std::string_view origin_;
  std::string path_;  // "linux.seccomp." inside an OCI config.json, so messages locate fields
};

// nlohmann's messages start with "[json.exception.parse_error.101] ".
std::string parse_error_text(const json::parse_error& e) {
  std::string text = e.what();
  if (auto pos = text.find("] "); pos != std::string::npos) text.erase(0, pos + 2);
  std::replace_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return text;
}

}  // namespace

Expected<std::vector<std::string>> import_oci_seccomp(std::string_view json_text,
                                                      std::string_view origin) {
  // nlohmann's lexer takes a NUL byte for the end of the input (nlohmann/json
  // issue #1095), so "{...}\0anything" would import with everything from the
  // NUL on silently ignored. No JSON text holds a raw NUL (a string escapes it
  // as \u0000): reject it like any other malformed byte. Found by fuzzing.
  if (const std::size_t nul = json_text.find('\0'); nul != std::string_view::npos) {
    return Error{std::string(origin) + ": malformed JSON at byte " + std::to_string(nul + 1) +
                 ": a NUL byte, which JSON text cannot contain"};
  }
  try {
    const json root = json::parse(json_text.begin(), json_text.end());
    return Importer(origin).run(root);
  } catch (const json::parse_error& e) {
    return Error{std::string(origin) + ": malformed JSON at byte " + std::to_string(e.byte) +
                 ": " + parse_error_text(e)};
  } catch (const json::exception& e) {
    // Not expected (every field is type-checked before use), but no JSON
    // exception may leave this file.
    return Error{std::string(origin) + ": cannot read profile: " + e.what()};
  }
}

}  // namespace pillbox
