#include "supervisor/io/shell_quote.h"

namespace pillbox {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') out += "'\\''";
    else out += ch;
  }
  return out + "'";
}

}  // namespace pillbox
