#!/usr/bin/env bash
# Configures and builds pillbox into a build directory (default: build).
#   tools/build.sh [BUILD_DIR] [extra cmake args...]
# Warnings are errors here: the tree builds with zero warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPILLBOX_WERROR=ON "$@" >/dev/null
ninja -C "$dir"
