#pragma once
// Masks what names a task's payload in its failure message before hashing.
// An exec program gets its payload under the input's own name
// (shared/task_input.h) and messages repeat it ("bad date in
// contacts-011.csv"): unmasked, each bad file would be its own group for one
// bug. The message shown keeps the name.
#include <string>
#include <string_view>

namespace pillbox {

struct Traceback;

// `message` with each mention of the payload replaced by "<payload>": the
// file's path (in the payload dir, or /proc/self/fd/3 on a host without a
// private /tmp), and the key and the file's name where they look like a
// path or a file's name (a '/' or an extension: "alice.csv", not "alice").
// A name is only replaced as a whole word ("a.csv" not inside "data.csv").
std::string mask_payload_names(std::string_view message, std::string_view key);

// The same for the frames of a traceback: a script that is itself the
// payload (python3 {}) has frames in the payload's file, whose name changes
// with every input ("f (alpha.py)") and is "3" without a private /tmp.
void mask_payload_frames(Traceback& traceback, std::string_view key);

}  // namespace pillbox
