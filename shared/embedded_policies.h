#pragma once
// The policies shipped in policies/, compiled into the binary (see
// tools/embed_policies.cmake), so `--policy strict` works wherever pillbox is
// installed.
#include <string_view>
#include <vector>

namespace pillbox {

struct EmbeddedPolicy {
  std::string_view name;  // file name without ".policy"
  std::string_view text;  // the file's contents
};

const std::vector<EmbeddedPolicy>& embedded_policies();

}  // namespace pillbox
