#pragma once
// Faults the tests inject into the sandbox side through its environment,
// for what no task can provoke on its own. The supervisor passes such a
// variable to pillbox-sandbox only when it has it itself
// (supervisor/exec/sandbox_env.cpp); each one can only make the sandbox
// fail more, never confine less.

namespace pillbox {

// A leftover of this name at the top of a slot's private /tmp, /var/tmp or
// /dev/shm is treated as one the slot's uid may not remove
// (sandbox/private_tmp.cpp): the slot must then be rebuilt
// (tests/e2e/slot_cleanup_test.cpp).
inline constexpr const char* kUnremovableForTestsEnv = "PILLBOX_TEST_UNREMOVABLE";

}  // namespace pillbox
