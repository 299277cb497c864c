#!/usr/bin/env bash
# Quick start (b): installs what is missing, builds, and runs the whole test
# suite on a normal build, then the tests of what is hostile (labelled asan,
# tests/CMakeLists.txt) on an AddressSanitizer/UBSan build; between the two,
# a short smoke run of every fuzz harness (fuzz/smoke.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --tests
jobs=$(nproc)

# Lean (no debug info, tools/build.sh says why), as tools/demo.sh builds, so
# a demo's build is reused here; the tests are turned on in case it was one.
tools/build.sh --lean build -DPILLBOX_TESTS=ON
ctest --test-dir build --output-on-failure --timeout 900 -j "$jobs"

# libFuzzer harnesses (fuzz/): a clang build of only the harnesses, then each
# one for a fixed time from its seed corpus; a finding fails CI, its input is
# saved in fuzz/. About 1 minute on 2 cores (fuzz/README.md).
fuzz/smoke.sh "${PILLBOX_FUZZ_SECONDS:-6}" build-fuzz

# Line tables only (-g1): sanitizer reports keep file:line, compiling is cheaper.
# The tests' own code is compiled without instrumentation (tests/CMakeLists.txt);
# everything they test is instrumented.
# This build lives under /tmp, in a directory whose name has a space: every
# test then also runs from a tree that tasks see privately (each gets its
# own /tmp) and that the loader cannot name in LD_PRELOAD, wherever the
# clone is (issue 24). One per clone (the hash of its path);
# PILLBOX_ASAN_BUILD chooses another.
asan_build=${PILLBOX_ASAN_BUILD:-/tmp/pillbox asan-$(pwd -P | sha256sum | cut -c1-12)}
echo "test: the ASan/UBSan build is in '$asan_build'"
# Only what the sanitizer run needs (the asan_suite target), and only the
# tests labelled asan: tests/CMakeLists.txt says which, and why not all.
PILLBOX_BUILD_TARGET=asan_suite tools/build.sh "$asan_build" -DPILLBOX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DCMAKE_C_FLAGS_DEBUG="-g1"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$asan_build" -L asan --output-on-failure --timeout 1800 -j "$jobs"
echo "test: all suites passed (normal, fuzz smoke and the ASan/UBSan selection), $jobs cores"
