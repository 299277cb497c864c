#pragma once
// The results of `run --out DIR` and `quarantine replay --out DIR`, one file
// per ok task, in a directory others may write to too. So the directory is
// opened once and each file is a new temp file (O_EXCL, O_NOFOLLOW) renamed
// into place: a planted symlink is replaced, never written through. A
// symlink the user names as DIR is followed.
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
// bytes other than A-Z a-z 0-9 . - _ become %XX, then ".out". An escaped key
// longer than kMaxEscapedKey is cut there (never mid-escape) and followed by
// '~' and the whole key's SHA-256; a short key's '~' is escaped. Names stay
// within 255 bytes.
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

  // Writes `bytes` as the result of `key` and returns the path written. The
  // same name again in one run gets name~2.out, ~3, ...: never overwritten
  // within a run; an earlier run's file is replaced. `variant`
  // (result_variant, or empty) names results of one key with different
  // payloads NAME~VARIANT.out, the same in every run, still one to one (a
  // long key's '~' is followed by 64 hex digits, not 16). Errors: one line
  // naming the file.
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
