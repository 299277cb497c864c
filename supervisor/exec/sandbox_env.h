#pragma once
// The environment pillbox-sandbox is started with, in both launch modes.
//
// Built from nothing, never inherited: the sandbox side's environment strings
// sit in its initial stack, which every zygote child inherits at fork and a
// spawned child gets at exec, and clearenv() only drops the pointer to them.
// A hostile in-process handler that scans its stack or reads
// /proc/self/environ would find whatever the supervisor was started with
// (tokens, passwords). Exec programs get an environment of their own on top
// (sandbox/child_runtime.cpp, exec_program).
#include <boost/process/environment.hpp>

namespace pillbox {

enum class LaunchMode;

// Only what the sandbox side reads: PILLBOX_PDF_TEXT_LIB when the supervisor
// has it (where the pdf-text module is), a test's fault when it has one
// (shared/fault_injection.h), LD_BIND_NOW for a zygote (every
// symbol resolved once, before the children fork), and in a sanitizer build
// the sanitizers' options.
// Given to Boost.Process as the child's whole environment.
boost::process::environment sandbox_environment(LaunchMode mode);

}  // namespace pillbox
