#!/usr/bin/env bash
# bench/quarantine_scale.sh — quarantine insert rate and `quarantine list` on a big store.
#
# usage: bench/quarantine_scale.sh [BUILD_DIR] [RECORDS]   (defaults: build, 100000)
#   env: ROUNDS (default 3), SMALL (default 5000), KEEP=1 keeps the temp dir
#
# Inserts do not go through the sandbox (that would measure the sandbox): the
# script compiles bench/quarantine_insert.cpp against BUILD_DIR's libraries,
# with the compiler and flags the build used, into its temp dir. Then:
#
#   1. group commits vs one transaction per record: ROUNDS rounds, order
#      alternating, each inserting SMALL records into a fresh store, once with
#      1000 records per transaction and once with 1 (no group commit).
#      records/s per variant (median) and the ratio per round (median).
#   2. RECORDS records into one store, 1000 per transaction: records/s.
#   3. on that store, ROUNDS rounds (order rotating) of
#        pillbox quarantine list --store DIR              > /dev/null
#        pillbox quarantine list --store DIR --json       > /dev/null
#        pillbox quarantine list --store DIR --limit 50   > /dev/null
#      wall seconds (median) and peak RSS; then the database's size.
#
# Each record is what `pillbox run` writes for a poison payload (see the
# program's header): task + attempt in the ledger, record, inline ~200-byte
# payload, audit row. Nothing is written into the repository; results are
# printed only.
set -euo pipefail

BENCH=quarantine_scale
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

BUILD_DIR=${1:-build}
RECORDS=${2:-100000}
ROUNDS=${ROUNDS:-3}
SMALL=${SMALL:-5000}
BATCH=1000

bench_build_dir "$BUILD_DIR" pillbox
bench_positive_ints RECORDS ROUNDS SMALL
bench_need python3
bench_workdir bin log

# --- the insert program --------------------------------------------------------
# The project's static libraries (copied: a rebuild during the run cannot
# change them), the compiler and -D/-std flags of the library's own objects
# (compile_commands.json), and the link libraries of the pillbox target
# (build.ninja or, for Makefile builds, CMakeFiles/pillbox.dir/link.txt).
for a in libpillbox_supervisor.a libpillbox_shared.a; do
  f=$(find "$BUILD_DIR" -maxdepth 3 -name "$a" -print -quit)
  [[ -n "$f" ]] || { echo "quarantine_scale: no $a under $BUILD_DIR" >&2; exit 2; }
  cp "$f" "$WORK/bin/"
done
cp "$BUILD_DIR/pillbox" "$WORK/bin/"
PB="$WORK/bin/pillbox"

mapfile -t BUILD_INFO < <(python3 - "$BUILD_DIR" <<'EOF'
import json, os, re, shlex, sys
build = sys.argv[1]
cmds = json.load(open(os.path.join(build, "compile_commands.json")))
entry = next(e for e in cmds if e["file"].endswith("supervisor/store/store.cpp"))
args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
flags = [a for a in args[1:] if a.startswith(("-D", "-std="))]
libs = None
ninja = os.path.join(build, "build.ninja")
link_txt = os.path.join(build, "CMakeFiles", "pillbox.dir", "link.txt")
if os.path.exists(ninja):
    text = open(ninja).read()
    m = re.search(r"^build pillbox:.*?\n((?:  .*\n)+)", text, re.M)
    for line in (m.group(1).splitlines() if m else []):
        if line.strip().startswith("LINK_LIBRARIES ="):
            libs = shlex.split(line.split("=", 1)[1])
if libs is None and os.path.exists(link_txt):
    words = shlex.split(open(link_txt).read())
    libs = [w for w in words[words.index("-o") + 2:] if not w.endswith(".o")]
if libs is None:
    sys.exit("cannot find pillbox's link libraries in build.ninja or link.txt")
libs = [l for l in libs if os.path.basename(l) not in ("libpillbox_supervisor.a", "libpillbox_shared.a")]
print(args[0])
print(" ".join(flags))
print(" ".join(libs))
EOF
)
[[ ${#BUILD_INFO[@]} == 3 ]] || { echo "quarantine_scale: cannot read the build's compiler and libraries" >&2; exit 2; }
CXX=${BUILD_INFO[0]}
read -ra CXXFLAGS <<<"${BUILD_INFO[1]}"
read -ra LIBS <<<"${BUILD_INFO[2]}"
"$CXX" "${CXXFLAGS[@]}" -O2 -I"$REPO_ROOT" -o "$WORK/bin/quarantine_insert" "$REPO_ROOT/bench/quarantine_insert.cpp" \
  "$WORK/bin/libpillbox_supervisor.a" "$WORK/bin/libpillbox_shared.a" "${LIBS[@]}" 2>"$WORK/log/compile" ||
  { echo "quarantine_scale: cannot compile quarantine_insert.cpp:" >&2; tail -n 20 "$WORK/log/compile" >&2; exit 1; }
QI="$WORK/bin/quarantine_insert"

fs_type=$(df -PT "$WORK" | awk 'NR == 2 { print $2 }')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "pillbox quarantine benchmark: $RECORDS records, small runs of $SMALL, $ROUNDS rounds; store on $fs_type;" \
  "load average before: $load_before (cores: $(nproc))" >&2

# Warm-up (and a check that the program works).
"$QI" "$WORK/warm" 200 100 >/dev/null 2>"$WORK/log/warm" || { cat "$WORK/log/warm" >&2; exit 1; }
rm -rf "$WORK/warm"

# --- 1. group commits vs one transaction per record ----------------------------
: >"$WORK/small.tsv"; : >"$WORK/loads.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order=("$BATCH" 1); else order=(1 "$BATCH"); fi
  for b in "${order[@]}"; do
    out=$("$QI" "$WORK/small-$r-$b" "$SMALL" "$b" 2>"$WORK/log/small") || { cat "$WORK/log/small" >&2; exit 1; }
    printf '%s\t%d\t%s\n' "$b" "$r" "$out" >>"$WORK/small.tsv"
    echo "  round $r  batch $b: $out" >&2
    rm -rf "$WORK/small-$r-$b"
  done
  printf 'small %d\t%s\n' "$r" "$(cut -d' ' -f1 /proc/loadavg)" >>"$WORK/loads.tsv"
done

# --- 2. RECORDS records, group commits --------------------------------------------
STORE="$WORK/store"
big=$("$QI" "$STORE" "$RECORDS" "$BATCH" 2>"$WORK/log/big") || { cat "$WORK/log/big" >&2; exit 1; }
echo "  big: $big" >&2
printf 'big\t%s\n' "$(cut -d' ' -f1 /proc/loadavg)" >>"$WORK/loads.tsv"

# --- 3. quarantine list ----------------------------------------------------------------
# Sanity: the table and --json list every record, --limit 50 lists 50.
n_json=$("$PB" quarantine list --store "$STORE" --json 2>/dev/null | wc -l)
n_limit=$("$PB" quarantine list --store "$STORE" --json --limit 50 2>/dev/null | wc -l)
[[ $n_json == "$RECORDS" && $n_limit == 50 ]] ||
  { echo "quarantine_scale: list shows $n_json records (--limit 50: $n_limit), expected $RECORDS" >&2; exit 1; }

LISTS=(table json limit50)
list_args() {  # VARIANT
  case "$1" in
    table)   echo "" ;;
    json)    echo "--json" ;;
    limit50) echo "--limit 50" ;;
  esac
}
# One run: wall seconds and the child's peak RSS (KiB), stdout to /dev/null.
timed() {  # ARGS...
  python3 - "$@" <<'EOF'
import resource, subprocess, sys, time
t0 = time.monotonic()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
dt = time.monotonic() - t0
print(f"{dt:.4f}\t{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\t{rc}")
EOF
}
: >"$WORK/lists.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < ${#LISTS[@]}; k++)); do
    v=${LISTS[$(((k + r - 1) % ${#LISTS[@]}))]}
    read -ra extra <<<"$(list_args "$v")"
    res=$(timed "$PB" quarantine list --store "$STORE" "${extra[@]}")
    [[ $(cut -f3 <<<"$res") == 0 ]] || { echo "quarantine_scale: quarantine list ($v) failed" >&2; exit 1; }
    printf '%s\t%d\t%s\n' "$v" "$r" "$res" >>"$WORK/lists.tsv"
    echo "  round $r  list $v: $(cut -f1 <<<"$res") s" >&2
  done
  printf 'list %d\t%s\n' "$r" "$(cut -d' ' -f1 /proc/loadavg)" >>"$WORK/loads.tsv"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report ------------------------------------------------------------------
python3 - "$WORK" "$STORE" "$RECORDS" "$SMALL" "$ROUNDS" "$BATCH" "$big" "$load_before" "$load_after" "$(nproc)" "$fs_type" <<'EOF'
import json, os, sqlite3, statistics, sys

work, store, records, small, rounds, batch, big, load_before, load_after, cores, fs_type = sys.argv[1:12]
records, small, rounds, batch, cores = int(records), int(small), int(rounds), int(batch), int(cores)

def fields(line):
    return dict(kv.split("=") for kv in line.split())

runs = {}
for line in open(f"{work}/small.tsv"):
    b, r, out = line.rstrip("\n").split("\t")
    runs.setdefault(int(b), {})[int(r)] = float(fields(out)["records_per_s"])
rs = sorted(runs[batch])
batched = [runs[batch][r] for r in rs]
single = [runs[1][r] for r in rs]
ratio = [b / s for b, s in zip(batched, single)]
bigf = fields(big)

print(f"\npillbox quarantine benchmark — store on {fs_type}, {rounds} rounds (median)")
print(f"\ninserts ({small} records into a fresh store, both ways in every round):")
print(f"  {batch} records per transaction  {statistics.median(batched):>8.0f} records/s")
print(f"  1 record per transaction     {statistics.median(single):>8.0f} records/s")
print(f"  group commit speed-up        {statistics.median(ratio):>8.1f}x   per round: "
      + "  ".join(f"{x:.1f}x" for x in ratio))
print(f"\ninserts ({records} records into one store, {batch} per transaction, one run):"
      f" {float(bigf['records_per_s']):.0f} records/s ({float(bigf['seconds']):.1f} s)")

lists = {}
for line in open(f"{work}/lists.tsv"):
    v, r, sec, rss, rc = line.rstrip("\n").split("\t")
    lists.setdefault(v, []).append((float(sec), int(rss)))
labels = {"table": "quarantine list", "json": "quarantine list --json", "limit50": "quarantine list --limit 50"}
print(f"\n`pillbox quarantine list --store DIR` over {records} records (stdout to /dev/null):")
for v, label in labels.items():
    secs = [s for s, _ in lists[v]]
    rss = max(m for _, m in lists[v])
    print(f"  {label:<30}{statistics.median(secs):>8.3f} s   per round: "
          + "  ".join(f"{s:.3f}" for s in secs) + f"   peak RSS {rss / 1024:.0f} MiB")

sizes = {f: os.path.getsize(os.path.join(store, f)) for f in os.listdir(store) if f.startswith("pillbox.db")}
c = sqlite3.connect(f"file:{store}/pillbox.db?mode=ro", uri=True)
rows = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("tasks", "attempts", "quarantine", "payloads", "audit")}
fps = c.execute("SELECT count(DISTINCT fingerprint) FROM quarantine").fetchone()[0]
db = sizes.get("pillbox.db", 0)
print(f"\ndatabase: pillbox.db {db / 1048576:.1f} MiB ({db / records:.0f} bytes per record), "
      f"wal {sizes.get('pillbox.db-wal', 0) / 1048576:.1f} MiB; rows {rows}; {fps} fingerprints")

loads = [l.rstrip("\n").split("\t") for l in open(f"{work}/loads.tsv") if l.strip()]
print("load average (1 min) after each step: " + "  ".join(f"{w}: {l}" for w, l in loads))
print(f"load average before: {load_before}; after: {load_after}; cores: {cores}"
      + ("  (machine busy: load above core count)" if max(float(load_before.split()[0]), float(load_after.split()[0])) > cores else ""))

raw = {"records": records, "small": small, "rounds": rounds, "batch": batch, "fs": fs_type,
       "small_records_per_s": {str(batch): batched, "1": single}, "group_commit_ratio": ratio,
       "big": bigf, "list_seconds": {v: [s for s, _ in lists[v]] for v in labels},
       "list_peak_rss_kib": {v: max(m for _, m in lists[v]) for v in labels},
       "db_bytes": sizes, "rows": rows, "load_before": load_before, "load_after": load_after,
       "loads": loads}
print("\nraw: " + json.dumps(raw, sort_keys=True))
EOF
