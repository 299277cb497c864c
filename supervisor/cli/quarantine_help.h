#pragma once
// The help of each `pillbox quarantine` verb (`pillbox quarantine VERB
// --help`); `pillbox quarantine --help` is the overview of them all.
#include <string>

namespace pillbox::cli {

// The help text of `verb`, or nullptr for a verb quarantine does not have.
const char* quarantine_verb_help(const std::string& verb);

}  // namespace pillbox::cli
