#pragma once
// How an exec command names its task's input: the replacement strings of its
// command line (as GNU parallel's) and the file the payload becomes.
//
//   {}     the payload as a file: /tmp/pillbox-input/NAME in the task's own
//          /tmp, where NAME is the base name of the task's key
//          ("contacts/contacts-011.csv" -> contacts-011.csv), so a program
//          that looks at the extension sees the one the input had
//   {.}    the same path without its extension
//   {/}    NAME alone, {/.} NAME without its extension (text: the file is {})
//   {key}  the task's key, as given (also in $PILLBOX_KEY)
//
// The child (sandbox/child_runtime.cpp) makes the file and expands the
// strings; the supervisor decides from the same list whether a command names
// the file (then stdin is /dev/null) and which of its arguments are not
// paths of its own (supervisor/exec/child_setup.cpp), and masks the names
// in failure messages so that one bug is one fingerprint whatever file it
// met (supervisor/classify/payload_names.h).
#include <cstddef>
#include <string>
#include <string_view>

namespace pillbox {

// The directory of the payload file, inside the task's private /tmp: a tmpfs
// of its own that holds one file (sandbox/private_tmp.cpp).
inline constexpr std::string_view kPayloadDir = "/tmp/pillbox-input";
// Where the task has no private /tmp (the host refused a mount namespace, or
// the policy gives none): the payload stays in a memory file on fd 3.
inline constexpr std::string_view kPayloadFdPath = "/proc/self/fd/3";
// The largest payload a task takes, wherever it comes from (an input file, a
// JSON line, a broker entry, a record's patch); the payload file's tmpfs is
// sized to hold it.
inline constexpr std::size_t kMaxPayloadBytes = std::size_t{1} << 30;  // 1 GiB
// A key is handed to the child with the task (the file name, {key},
// $PILLBOX_KEY): longer ones are refused where tasks come in. 64 KiB is far
// above any path (PATH_MAX is 4 KiB) and below what execve takes in one
// argument (128 KiB).
inline constexpr std::size_t kMaxTaskKeyBytes = 64 * 1024;

// The payload file's name for `key`: its last component, with every byte a
// shell would act on (blanks, quotes, ;|&$`<>(){}[]*?!~#\ and controls)
// made '_', and a leading '-' too, so that {} is safe inside `sh -c '...'`
// and {/} is never an option. "payload" when the component is no usable
// name: empty, dots only, or over 255 bytes.
std::string payload_file_name(std::string_view key);

// `name` without its extension: up to its last '.', unless only dots come
// before it (".bashrc" and "..x" have none).
std::string_view without_extension(std::string_view name);

// Whether `arg` holds a string that names the payload's file ({}, {.}, {/},
// {/.}), or any replacement string at all ({key} too).
bool names_payload_file(std::string_view arg);
bool has_replacement_string(std::string_view arg);

// `arg` with every replacement string expanded, left to right; what they
// expand to is not scanned again (a key holding "{}" stays as it is).
std::string expand_replacement_strings(std::string_view arg, std::string_view payload_path,
                                       std::string_view key);

}  // namespace pillbox
