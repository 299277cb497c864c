#pragma once
// An uncaught exception's message as fingerprint input: what changes from
// one payload to the next is replaced, so one raise site gives one
// fingerprint. Only the hashed text is normalized; users see the real one.
#include <string>
#include <string_view>
#include <vector>

namespace pillbox {

// The first line of `message` (at most 1 KiB of it read, at most 200 bytes
// out) with:
//   - quoted values ('abc', "it's", b'\x00', with backslash escapes) -> '?'
//     (Python's repr picks either quote by the content, so both become the
//     same); an apostrophe inside a word ("can't") opens no quote;
//   - hex numbers 0x7f3a... -> 0xX, other digit runs -> N;
//   - absolute paths under a temporary directory (/tmp, /var/tmp, /dev/shm
//     and each of `temp_dirs`) -> <tmp>; the task's own payload file, which an
//     exec program is given as /proc/self/fd/N -> <payload>.
std::string exception_message_key(std::string_view message, const std::vector<std::string>& temp_dirs = {});

}  // namespace pillbox
