#!/usr/bin/env bash
# Configures and builds pillbox into a build directory (default: build).
#   tools/build.sh [--lean] [BUILD_DIR] [extra cmake args...]
# Warnings are errors here: the tree builds with zero warnings.
# --lean: without debug info, as tools/demo.sh and tools/test.sh build. GCC
# generates the same code with and without -g, in about a quarter less
# compile time; crash frames are named from ELF symbol tables, not DWARF (the
# test fixtures keep their -g). Both scripts build the same way, so the
# product's objects of one are reused by the other.
set -euo pipefail
cd "$(dirname "$0")/.."
lean=()
if [ "${1:-}" = "--lean" ]; then
  lean=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG")
  shift
fi
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPILLBOX_WERROR=ON "${lean[@]}" "$@" >/dev/null
# PILLBOX_BUILD_TARGET: one target instead of all (tools/test.sh's asan_suite).
ninja -C "$dir" ${PILLBOX_BUILD_TARGET:-}
