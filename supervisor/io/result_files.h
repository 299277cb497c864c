#pragma once
// The results of `run --out DIR` and `quarantine replay --out DIR`: one file
// per successful task, in a directory others may write to too (a task whose
// policy lets it write there, another user). So the directory is opened
// once and every file is created relative to it: a new temp file (O_EXCL,
// O_NOFOLLOW), then renamed to its name. A symlink planted at that name is
// replaced, never written through; a directory there is an error for that
// result. The directory itself is the one the user named: a symlink given on
// the command line is followed, like any path they type.
#include <sys/types.h>

#include <map>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox {

// Results are private to their owner unless asked otherwise (--out-mode).
inline constexpr mode_t kDefaultResultMode = 0600;

// The file name of the result of `key`, one to one (README.md, "--out"):
// bytes other than A-Z a-z 0-9 . - _ become %XX (upper-case hex; '%' itself
// is %25, '/' is %2F), then ".out" is appended. So `a/b` is a%2Fb.out and
// `a_b` is a_b.out, and no name is ".", ".." or holds a '/'. An escaped key
// longer than kMaxEscapedKey keeps its first kMaxEscapedKey bytes (never
// half an escape), then '~' and the SHA-256 of the whole key in hex: no
// short key's name holds a '~' (it is escaped), and two long keys share a
// name only if they share a SHA-256. Names stay within 255 bytes.
inline constexpr std::size_t kMaxEscapedKey = 160;
std::string result_file_name(std::string_view key);

// The variant of the result of a key given again with another payload: the
// first 16 hex digits of that payload's SHA-256 (hex, as the store has it).
inline std::string_view result_variant(std::string_view payload_sha256) { return payload_sha256.substr(0, 16); }

class ResultFiles {
 public:
  // Creates `dir` when it is missing (and its parents), opens it and checks
  // that it can be written. Errors: one line naming the directory.
  static Expected<ResultFiles> open(const std::string& dir, mode_t mode = kDefaultResultMode);

  // Writes `bytes` as the result of `key`, mode exactly as opened, and
  // returns the path written (DIR/name). The same key a second time in one
  // run (another payload under that key) gets name~2.out, then ~3, ...: a
  // result is never overwritten by another of the same run. A file from an
  // earlier run under the same name is replaced. Errors: one line naming the
  // file ("cannot write result DIR/k.out: Is a directory").
  // `variant` (hex digits, or empty) tells apart results of one key with
  // different payloads, the same way in every run: NAME~VARIANT.out, where
  // VARIANT is the first 16 hex digits of the payload's SHA-256
  // (result_variant). No key's own name holds a '~' followed by 16 hex
  // digits and ".out" (a '~' in a key is escaped; a long key's '~' is
  // followed by 64), so the names stay one to one.
  Expected<std::string> write(std::string_view key, std::string_view bytes, std::string_view variant = {});

  const std::string& dir() const { return dir_; }

 private:
  ResultFiles(UniqueFd dir_fd, std::string dir, mode_t mode)
      : dir_fd_(std::move(dir_fd)), dir_(std::move(dir)), mode_(mode) {}

  UniqueFd dir_fd_;  // owned; every result is created relative to it
  std::string dir_;  // as the user gave it, for the paths reported
  mode_t mode_;
  std::map<std::string, unsigned> written_;  // names written by this run -> results under that name
};

}  // namespace pillbox
