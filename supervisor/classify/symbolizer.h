#pragma once
// Turns raw frames (ELF module path + offset from its load bias) captured in a
// child into function names, in the supervisor. Reads .symtab (or .dynsym when
// stripped) of each module once and caches it; a module that is missing,
// unreadable or not ELF yields frames without names, never an error.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shared/crash_report.h"
#include "shared/fingerprint.h"

namespace pillbox {

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Demangled name of the function containing `offset` in `module_path`, or "".
  // `is_return_address` looks up offset-1 (callers' frames hold return addresses).
  std::string function_at(const std::string& module_path, std::uint64_t offset,
                          bool is_return_address);

  // Symbolizes every frame; frames[0] is the faulting pc, the rest return addresses.
  std::vector<SymbolizedFrame> symbolize(const std::vector<RawFrame>& frames);

 private:
  struct Module;
  const Module* load(const std::string& path);
  std::map<std::string, std::unique_ptr<Module>> cache_;
};

}  // namespace pillbox
