#pragma once
// Ids that must not collide between processes (a canary's, a submit's
// message ids, a state writer's): `bytes` from getrandom(2), as hex.
#include <cstddef>
#include <string>

#include "shared/status.h"

namespace pillbox {

// 2 * `bytes` lowercase hex digits; an error when the kernel gives none.
Expected<std::string> random_hex(std::size_t bytes);

}  // namespace pillbox
