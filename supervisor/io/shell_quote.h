#pragma once
// A word for sh: the bytes as they are, single-quoted, quotes closed and
// reopened. Used by reproduce.sh (supervisor/ops/record_bundle.h) and by
// `quarantine show`'s command line.
#include <string>

namespace pillbox {

std::string shell_quote(const std::string& s);

}  // namespace pillbox
