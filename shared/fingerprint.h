#pragma once
// Crash state and fingerprints (docs/architecture.md, 'Failure kinds and the
// classifier'). The crash state is the top three meaningful frames after
// dropping libc/libstdc++/allocator/abort/raise frames and pillbox's own
// runtime frames, with addresses normalized; the fingerprint is a short
// stable id of kind + signal/syscall + crash state + handler identity: same
// bug, different payloads -> same fingerprint.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/failure_kind.h"

namespace pillbox {

struct SymbolizedFrame {
  std::string module;        // ELF path as the child saw it
  std::uint64_t offset = 0;  // pc minus load bias
  std::string function;      // demangled name; "" when no symbol covers the pc
};

// Shortens a demangled C++ name to a stable identity: drops template
// arguments, parameter lists, ABI tags, "[clone .cold]" suffixes.
// "std::vector<int>::at(unsigned long) const" -> "std::vector::at"
std::string normalize_function(std::string_view demangled);

// True for frames that never identify a bug (libc, libstdc++ internals,
// allocator, abort/raise/assert, the unwinder, pillbox's runtime).
bool is_ignored_frame(const SymbolizedFrame& frame);

// Up to `depth` meaningful frames, innermost first. Frames without a symbol
// appear as "module+0xOFFSET" (basename of the module).
std::vector<std::string> crash_state(const std::vector<SymbolizedFrame>& frames,
                                     std::size_t depth = 3);

// True when the report's window of 64 frames is full and a cycle of up to 16
// frames covers at least 48 of them: the signature of unbounded recursion.
// A crash a few levels down an ordinary recursion is not one.
bool frames_recurse(const std::vector<SymbolizedFrame>& frames);

// Crash state of a stack overflow. Where the stack runs out inside a
// recursion cycle depends on the stack's (randomized) start, so "the top
// three frames" would differ from run to run. Instead: the meaningful
// functions of one turn of the longest recursion cycle (up to 16 frames,
// repeated at least twice), sorted, up to `depth`. Frames above the cycle
// are left out. Falls back to crash_state() when nothing repeats (one huge
// frame).
std::vector<std::string> recursion_state(const std::vector<SymbolizedFrame>& frames,
                                         std::size_t depth = 3);

// For handler-error: the first line of the message with numbers and hex
// normalized, so "bad byte at offset 1234" and "... 99" match.
std::string normalize_message(std::string_view message);

// "pb1-" + 16 hex digits of SHA-256 over the canonical fields.
std::string make_fingerprint(Kind kind, std::string_view detail /* signal or syscall name */,
                             const std::vector<std::string>& state,
                             std::string_view handler_identity);

}  // namespace pillbox
