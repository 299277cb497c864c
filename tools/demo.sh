#!/usr/bin/env bash
# Quick start (a): installs what is missing, builds, and runs pillbox on the
# bundled sample corpus of good and poison inputs (samples/). Each run below
# is expected to end with exit code 1: some inputs are poison by design.
# It installs and builds the product only (no test tools, no test
# programs): tools/test.sh adds those to the same build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh --lean build -DPILLBOX_TESTS=OFF
pillbox=build/pillbox
work=build/demo
mkdir -p "$work"
# A fresh store for every demo, so each step runs everything (a second run
# over the same store would skip what is already done: that is resume).
rm -rf "$work/store"
export PILLBOX_STORE="$PWD/$work/store"

# Runs pillbox and accepts exit codes 0 (all ok) and 1 (some tasks failed);
# 2 (usage) and 3 (setup) mean the demo itself is broken.
run() {
  echo
  echo "\$ pillbox $*"
  set +e
  "$pillbox" "$@"
  local rc=$?
  set -e
  if [ "$rc" -gt 1 ]; then
    echo "demo: pillbox exited with $rc" >&2
    exit "$rc"
  fi
}

echo "== 1. A regex engine meets catastrophic backtracking (cpu-limit), the rest goes on"
run run --handler regex --arg 'pattern=^(a+)+$' --cpu 2s samples/regex

echo "== 2. The same engine's recursion overflows the stack on a long subject (stack-overflow)"
run run --handler regex --arg 'pattern=(a|b)*' samples/regex-deep

echo "== 3. A decompression bomb (oom) among good and corrupt gzip files"
if [ ! -s "$work/bomb-1GiB.gz" ]; then
  head -c 1073741824 /dev/zero | gzip -9 > "$work/bomb-1GiB.gz"   # ~1 MB that inflates to 1 GiB
fi
run run --handler inflate --memory 256M samples/gzip "$work/bomb-1GiB.gz"

echo "== 4. PDFs through poppler: good ones give their text, broken ones a handler-error"
run run --handler pdf-text --json samples/pdf

echo "== 5. JSON lines on stdin, one JSON record per task"
run run --handler regex --arg 'pattern=^(a+)+$' --cpu 1s --json - < samples/jsonl/tasks.jsonl

echo "== 6. What was quarantined: each poison payload once, after 2 attempts with the same fingerprint"
run quarantine list

echo "== 7. Grouped by the bug that made them"
run quarantine stats

# The id of the newest record of a kind (the JSON keys are sorted: "id" is a plain number).
newest_of_kind() {
  "$pillbox" quarantine list --kind "$1" --limit 1 --json | sed -n 's/.*"id":\([0-9]*\).*/\1/p'
}
slow=$(newest_of_kind cpu-limit)
broken=$(newest_of_kind handler-error)

echo "== 8. Does the catastrophic-backtracking payload fail every time? (reliable or flaky)"
run reproduce "$slow" --runs 3
run quarantine show "$slow"

echo "== 9. The smallest broken PDF that still fails the same way"
run minimize "$broken" --max-runs 300

echo "== 10. The fix (a pattern without nested quantifiers), replayed with a stop condition"
run quarantine replay --kind cpu-limit --handler regex --arg 'pattern=^a+$' --stop-after 2 --batch 5

echo "== 11. A Python parser: each uncaught exception's traceback is its crash state, and the values in"
echo "       its message are left out of the fingerprint: 3 bad amounts are one bug, a missing separator another"
# The system's python3: the task runs as an unprivileged uid, which may not
# enter a version manager's shims under a 0700 home directory (pillbox says so).
# Nor a clone there (/root/pillbox): then the demo runs a copy of the parser
# from a directory every uid may enter.
parser=samples/python/parse_record.py
if [ "$(id -u)" -eq 0 ] && ! setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$PWD/$parser"; then
  copy=$(mktemp -d /tmp/pillbox-demo.XXXXXX)
  trap 'rm -rf "$copy"' EXIT
  chmod 0755 "$copy"
  cp "$parser" "$copy/"
  parser=$copy/parse_record.py
  echo "(this clone is where an unprivileged uid cannot read it: the tasks run a copy of the parser, $parser)"
fi
run run samples/python/records -- /usr/bin/python3 "$parser" {}
run quarantine stats --handler exec
value_error=$("$pillbox" quarantine list --key samples/python/records/bad-amount-word.txt --limit 1 --json |
  sed -n 's/.*"id":\([0-9]*\).*/\1/p')
run quarantine show "$value_error"

echo "== 12. Results are never lost: the ok results of every run are kept in the store"
run results
run results samples/python/records/good-alice.txt

echo "== 13. Every task, whatever became of it (pending, retrying, held, gave-up, ok, quarantined)"
run tasks --handler exec

echo
echo "demo: done. Store: $PILLBOX_STORE. Try: $pillbox doctor"
