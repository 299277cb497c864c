# bench/lib.sh — the setup every benchmark script shares. Sourced, not run:
#   BENCH=echo_overhead; source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# BENCH names the script in its messages. Defines REPO_ROOT and the bench_*
# functions below; changes nothing else.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The script's usage: lines 2-5 of its header comment.
bench_usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; }

# -h/--help as the first argument prints the usage and exits.
bench_help() {
  case "${1:-}" in -h|--help) bench_usage; exit 0 ;; esac
}

# A usage or environment error: the message, exit 2.
bench_die() { echo "$BENCH: $*" >&2; exit 2; }

# bench_build_dir DIR FILE...: sets BUILD_DIR to DIR (relative to the
# repository when it is not a directory from here), absolute; every FILE must
# be an executable in it.
bench_build_dir() {
  local given=$1 dir=$1
  shift
  [[ -d "$dir" ]] || dir="$REPO_ROOT/$dir"
  [[ -d "$dir" ]] || bench_die "no build directory $given (build first)"
  BUILD_DIR=$(cd "$dir" && pwd)
  local f
  for f in "$@"; do
    [[ -x "$BUILD_DIR/$f" ]] || bench_die "no $f in $BUILD_DIR (build first)"
  done
}

# bench_positive_ints NAME...: each named variable holds a positive integer.
bench_positive_ints() {
  local name
  for name in "$@"; do
    [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || bench_die "$name must be a positive integer (got '${!name}')"
  done
}

# bench_need TOOL...: each is on PATH.
bench_need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || bench_die "needs $tool"
  done
}

# bench_workdir SUBDIR...: WORK, a fresh temp directory removed at exit
# (KEEP=1 keeps it and says where), with the given subdirectories. Mode 0755:
# the children run as `nobody` when pillbox runs as root, and must reach the
# inputs and programs in it. Not under /tmp unless TMPDIR says so (as root,
# /var/lib): a task's private /tmp keeps the paths it needs from the real
# /tmp, /var/tmp and /dev/shm visible, so a program and inputs there would
# make every task pay the check of a non-empty private /tmp, which programs
# installed anywhere else do not (sandbox/private_tmp.cpp).
bench_workdir() {
  local parent="${TMPDIR:-}"
  if [[ -z "$parent" ]]; then
    if [[ $(id -u) == 0 && -w /var/lib ]]; then parent=/var/lib; else parent=/tmp; fi
  fi
  WORK=$(mktemp -d "$parent/pillbox-bench.XXXXXX")
  trap bench_cleanup EXIT
  chmod 0755 "$WORK"
  local sub
  for sub in "$@"; do mkdir -p "$WORK/$sub"; done
}
bench_cleanup() { if [[ "${KEEP:-0}" == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi; }

# bench_snapshot_build: copies pillbox and its helpers (it finds them next to
# itself) from BUILD_DIR into $WORK/bin and sets PB, so that a rebuild by
# someone else during the run cannot swap binaries between rounds.
bench_snapshot_build() {
  mkdir -p "$WORK/bin"
  local f
  for f in pillbox pillbox-sandbox libpillbox-crash.so; do
    if [[ -e "$BUILD_DIR/$f" ]]; then cp "$BUILD_DIR/$f" "$WORK/bin/"; fi
  done
  chmod 0755 "$WORK/bin" "$WORK/bin/"*
  PB="$WORK/bin/pillbox"
}

# bench_fail_run WHAT RC LOG: a run that should not fail did; the end of its
# stderr, exit 1.
bench_fail_run() {
  echo "$BENCH: $1 failed (exit $2); its stderr:" >&2
  tail -n 20 "$3" >&2 || true
  exit 1
}

# bench_echo_stdin: builds $WORK/echo_stdin, the smallest program that does
# a task's work (stdin copied to stdout): the peers' program, and the one
# pillbox execs in exec mode.
bench_echo_stdin() {
  cat >"$WORK/echo_stdin.c" <<'EOF'
#include <unistd.h>
int main(void) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(0, buf, sizeof buf);
    if (n == 0) return 0;
    if (n < 0) return 1;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(1, buf + off, (size_t)(n - off));
      if (w < 0) return 1;
      off += w;
    }
  }
}
EOF
  cc -O2 -o "$WORK/echo_stdin" "$WORK/echo_stdin.c"
  chmod 0755 "$WORK/echo_stdin"
}

# bench_text_corpus DIR COUNT: COUNT small text files (50-210 bytes), the
# same every time.
bench_text_corpus() {
  python3 - "$1" "$2" <<'EOF'
import os, random, sys
random.seed(7)
for i in range(int(sys.argv[2])):
    with open(os.path.join(sys.argv[1], "t%06d" % i), "w") as f:
        f.write("payload %d " % i + "x" * random.randint(40, 200) + "\n")
EOF
}
