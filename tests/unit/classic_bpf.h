#pragma once
// A classic-BPF interpreter for seccomp programs, as the kernel runs them:
// the tests ask a compiled filter what it answers for a syscall without
// loading it, and how many instructions the kernel walks to get there (the
// kernel emulates the program for every syscall number when it loads it,
// to fill its allow cache: a longer path is a costlier load).
// Covers what libseccomp emits: absolute word loads of seccomp_data,
// ALU with a constant, conditional jumps on a constant, JA, TAX/TXA, RET.
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace pillbox::test {

struct BpfVerdict {
  std::uint32_t action = 0;  // the RET value: SECCOMP_RET_* with its data
  std::size_t steps = 0;     // instructions executed, RET included
};

// nullopt: an instruction this interpreter does not know, or a jump out of
// the program (the test fails rather than guessing).
inline std::optional<BpfVerdict> run_seccomp_bpf(const std::vector<sock_filter>& program, const seccomp_data& data) {
  std::uint32_t a = 0, x = 0;
  BpfVerdict verdict;
  for (std::size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& in = program[pc];
    ++verdict.steps;
    switch (BPF_CLASS(in.code)) {
      case BPF_LD:
        if (in.code != (BPF_LD | BPF_W | BPF_ABS) || in.k % 4 != 0 || in.k + 4 > sizeof data) return std::nullopt;
        std::memcpy(&a, reinterpret_cast<const char*>(&data) + in.k, 4);
        break;
      case BPF_ALU:
        if (BPF_SRC(in.code) != BPF_K) return std::nullopt;
        switch (BPF_OP(in.code)) {
          case BPF_AND: a &= in.k; break;
          case BPF_OR: a |= in.k; break;
          case BPF_RSH: a >>= in.k; break;
          case BPF_LSH: a <<= in.k; break;
          default: return std::nullopt;
        }
        break;
      case BPF_JMP: {
        if (BPF_OP(in.code) == BPF_JA) {
          pc += in.k;
          break;
        }
        if (BPF_SRC(in.code) != BPF_K) return std::nullopt;
        bool taken = false;
        switch (BPF_OP(in.code)) {
          case BPF_JEQ: taken = a == in.k; break;
          case BPF_JGT: taken = a > in.k; break;
          case BPF_JGE: taken = a >= in.k; break;
          case BPF_JSET: taken = (a & in.k) != 0; break;
          default: return std::nullopt;
        }
        pc += taken ? in.jt : in.jf;
        break;
      }
      case BPF_MISC:
        if (BPF_MISCOP(in.code) == BPF_TAX) {
          x = a;
        } else if (BPF_MISCOP(in.code) == BPF_TXA) {
          a = x;
        } else {
          return std::nullopt;
        }
        break;
      case BPF_RET:
        if (BPF_RVAL(in.code) != BPF_K) return std::nullopt;
        verdict.action = in.k;
        return verdict;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace pillbox::test
