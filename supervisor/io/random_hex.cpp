#include "supervisor/io/random_hex.h"

#include <sys/random.h>

#include <cstdio>
#include <vector>

namespace pillbox {

Expected<std::string> random_hex(std::size_t bytes) {
  std::vector<unsigned char> random(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(random.data() + got, bytes - got, 0);
    if (n <= 0) return Error{"getrandom failed"};
    got += static_cast<std::size_t>(n);
  }
  std::string hex(2 * bytes, '0');
  char two[3];
  for (std::size_t i = 0; i < bytes; ++i) {
    std::snprintf(two, sizeof two, "%02x", random[i]);
    hex[2 * i] = two[0];
    hex[2 * i + 1] = two[1];
  }
  return hex;
}

}  // namespace pillbox
