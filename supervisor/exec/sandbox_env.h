#pragma once
// The environment pillbox-sandbox is started with, in both launch modes.
// Built from nothing, never inherited: the strings sit in the initial stack
// every child inherits (clearenv() only drops the pointer), where a hostile
// handler would find the supervisor's tokens and passwords.
#include <boost/process/environment.hpp>

namespace pillbox {

enum class LaunchMode;

// Only what the sandbox side reads: PILLBOX_PDF_TEXT_LIB, a test's fault,
// LD_BIND_NOW for a zygote, and a sanitizer build's options. The child's
// whole environment.
boost::process::environment sandbox_environment(LaunchMode mode);

}  // namespace pillbox
