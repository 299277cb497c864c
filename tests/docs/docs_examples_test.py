#!/usr/bin/env python3
"""Runs every shell example of README.md and docs/*.md against the built pillbox.

usage: docs_examples_test.py SOURCE_DIR BUILD_DIR

What counts as an example (the way the docs write them):
  - a fenced block tagged sh, bash, shell or console;
  - any block, fenced or indented, with lines starting with "$ " (a transcript).
In a transcript the "$ " lines are commands (a trailing "\\" continues one on
the next line), the lines after one are what it prints, and "#" lines are
narration. Elsewhere every line that is not a comment is a command.

Each command must exit 0, unless a comment on it says otherwise ("# exit 1:
some inputs are poison"), or the transcript shows its status with
"$ echo $?" on the next line. Every output line a transcript shows must be
printed (stdout or stderr) by its command, compared after normalizing what
differs from run to run (times, numbers, hashes, fingerprints, hex dump
rows, mutation lists, plural s); "..." in a shown line stands for any text,
and "..." alone for lines left out.

Markers, HTML comments on the line before a block (invisible when rendered,
visible to whoever edits the block):
  <!-- doc-test: skip (why) -->  not run; the test prints "skipped: FILE:LINE: why"
  <!-- doc-test: file PATH -->   not a command: the block is the content of
                                  file PATH, written before the next examples run
  <!-- doc-test: redis -->       runs with a Redis server of the test's own on a
                                  free loopback port, which stands for the
                                  documents' 127.0.0.1:6379 (in redis:// URLs
                                  and for redis-cli)

How they run: the examples of one document run in order, in one bash
session, so one example may use what an earlier one made (a store, a record
id). Every block starts in one directory per document that looks like the
repository root after a build: samples/, examples/, policies/, ... link to
the source tree and build/ to the build directory, and pillbox on PATH is
the build's.
HOME, TMPDIR and the default store are in a temporary directory, and the
documents' "/tmp/" means that directory's tmp/, so nothing is written
outside it.

Then every --option that the documents name after "pillbox VERB" (in
examples, synopses and `inline code`) is checked against that verb's --help;
every verb's --help that offers --store must give the default the documents
give; and every duration unit the parser's own error message names must be
in docs/policy-format.md's table of durations.
"""

import concurrent.futures
import dataclasses
import os
import re
import shutil
import stat
import signal
import socket
import subprocess
import sys
import tempfile

# Long enough for one document's examples together, short enough to stop a hang.
DOC_TIMEOUT_S = 120
EXAMPLE_TAGS = {"sh", "bash", "shell", "console"}
# Entries of the source tree an example may name relative to the repository root.
SOURCE_ENTRIES = ["samples", "examples", "policies", "sandbox", "shared", "fuzz", "tools", "docs", "bench"]

MARKER_RE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^(\s*)```\s*([\w-]*)\s*$")
EXIT_COMMENT_RE = re.compile(r"(?:^|\s)#[^\n]*?\bexit (\d+)\b")


@dataclasses.dataclass
class Block:
    doc: str          # path relative to the source tree
    line: int         # 1-based line of its first content line
    tag: str          # the fence's info string; "" for bare and indented blocks
    lines: list       # its content, indentation removed
    marker: str       # the doc-test marker before it, or ""

    def where(self):
        return f"{self.doc}:{self.line}"

    def is_transcript(self):
        return any(l.startswith("$ ") for l in self.lines)

    def is_example(self):
        return self.tag in EXAMPLE_TAGS or self.is_transcript()


@dataclasses.dataclass
class Command:
    block: Block
    line: int
    text: str
    shown: list       # the output lines the document shows for it
    expected_exit: int  # None: a following "echo $?" checks it

    def script_text(self, tmp, redis_port):
        text = self.text.replace("/tmp/", tmp + "/")
        if self.block.marker == "redis":
            text = text.replace("redis://127.0.0.1:6379", f"redis://127.0.0.1:{redis_port}")
            text = re.sub(r"\bredis-cli ", f"redis-cli -p {redis_port} ", text)
        return text


def free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throwaway redis-server on loopback, without persistence, gone with the test."""

    def __init__(self, directory):
        self.port = free_loopback_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Ready when its log says so; the log is read, not polled.
        for line in self.process.stdout:
            if "Ready to accept connections" in line:
                return
        raise RuntimeError(f"redis-server on port {self.port} exited before it was ready")

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_blocks(source, doc):
    """Fenced blocks, and indented blocks that follow a blank line."""
    lines = read_text(os.path.join(source, doc)).split("\n")
    blocks = []
    marker = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER_RE.match(line)
        if m:
            marker = m.group(1)
            i += 1
            continue
        fence = FENCE_RE.match(line)
        if fence:
            indent = len(fence.group(1))
            start = i + 1
            j = start
            while j < len(lines) and not FENCE_RE.match(lines[j]):
                j += 1
            body = [l[indent:] if l[:indent].strip() == "" else l for l in lines[start:j]]
            blocks.append(Block(doc, start + 1, fence.group(2), body, marker))
            marker = ""
            i = j + 1
            continue
        if line.startswith("    ") and i > 0 and lines[i - 1].strip() == "" and line.strip():
            start = i
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or lines[j].strip() == ""):
                j += 1
            body = [l[4:] for l in lines[start:j]]
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(doc, start + 1, "", body, marker))
            marker = ""
            i = j
            continue
        if line.strip():
            marker = ""
        i += 1
    return blocks


def expected_exit_of(text):
    m = EXIT_COMMENT_RE.search(text)
    return int(m.group(1)) if m else 0


def commands_of(block):
    commands = []
    lines = block.lines
    transcript = block.is_transcript()
    i = 0
    while i < len(lines):
        raw = lines[i]
        if transcript and not raw.startswith("$ "):
            i += 1  # narration or output of no command
            continue
        text = raw[2:] if transcript else raw
        if not transcript and (not text.strip() or text.lstrip().startswith("#")):
            i += 1
            continue
        first = i
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text + "\n" + lines[i]
        i += 1
        shown = []
        if transcript:
            while i < len(lines) and not lines[i].startswith("$ ") and not lines[i].startswith("#"):
                shown.append(lines[i])
                i += 1
        commands.append(Command(block, block.line + first, text, shown, expected_exit_of(text)))
    for a, b in zip(commands, commands[1:]):
        if b.text.strip() == "echo $?":
            a.expected_exit = None
    return commands


# Run-to-run differences a shown output line may have from the real one.
NORMALIZATIONS = [
    (re.compile(r"^\s*[0-9a-f]{8}  [0-9a-f ]+\|.*\|$"), "<hex dump row>"),
    # "~": the list was cut short, which may fall just after a separator.
    (re.compile(r"\bmutations:? [a-z0-9-]+(?:(?:,| \| )[a-z0-9-]+)*(?:(?:,| \|? ?)?~)?"), "mutations: <list>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\bpb1-[0-9a-f]{16}\b"), "<fingerprint>"),
    (re.compile(r"\b[0-9a-f]{8,}\b"), "<hex>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\b(\w+)s\b"), r"\1"),  # "1 record", "2 records"
    (re.compile(r"\s+"), " "),
]


def normalize(line):
    for pattern, replacement in NORMALIZATIONS:
        line = pattern.sub(replacement, line)
    return line.strip()


def shown_line_printed(shown, printed_lines):
    """Whether some printed line is the shown one; "..." in it stands for anything."""
    fragments = [normalize(f) for f in re.split(r"\.\.\.|…", shown.strip())]
    pattern = re.compile(".*".join(re.escape(f) for f in fragments) + "$")
    return any(pattern.match(normalize(line)) for line in printed_lines)


def every_uid_may_enter(path):
    """Every directory above `path` lets others in (o+x), as a task's unprivileged uid needs."""
    directory = os.path.dirname(os.path.realpath(path))
    while True:
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            return False
        if directory == "/":
            return True
        directory = os.path.dirname(directory)


def make_repository_view(source, build, directory):
    os.makedirs(directory)
    for entry in SOURCE_ENTRIES:
        if os.path.exists(os.path.join(source, entry)):
            os.symlink(os.path.join(source, entry), os.path.join(directory, entry))
    view_build = os.path.join(directory, "build")
    if os.geteuid() != 0 or every_uid_may_enter(os.path.join(build, "fixtures")):
        os.symlink(build, view_build)
        return
    # As root, tasks run as unprivileged uids, which cannot enter a build
    # under a 0700 directory (a clone in /root): the view's build/ holds
    # copies of what tasks run or load (the fixtures, the libraries), in this
    # directory every uid may enter, and links to the rest.
    os.makedirs(view_build)
    os.chmod(view_build, 0o755)
    for entry in os.listdir(build):
        src, dst = os.path.join(build, entry), os.path.join(view_build, entry)
        if entry == "fixtures":
            shutil.copytree(src, dst, symlinks=True)
        elif entry.endswith(".so"):
            shutil.copy2(src, dst)
        else:
            os.symlink(src, dst)


def script_for(view, tmp, redis_port, runnable, results):
    """One bash script: every command of the document, its output and status kept apart."""
    parts = ["set +e"]
    for n, item in enumerate(runnable):
        if isinstance(item, tuple):  # (path, content): a file block
            path, content = item
            path = os.path.join(view, path.replace("/tmp/", tmp + "/"))
            parts.append(f"mkdir -p \"$(dirname '{path}')\" && cat > '{path}' <<'DOC_TEST_EOF'\n{content}\nDOC_TEST_EOF")
            continue
        if item == "new-block":
            parts.append(f"cd '{view}'")
            continue
        cmd = item.script_text(tmp, redis_port)
        out = os.path.join(results, f"{n}.out")
        rc = os.path.join(results, f"{n}.rc")
        # Output goes to a file, never a terminal; the status is restored so
        # that a following "echo $?" sees it.
        parts.append(f"{{\n{cmd}\n}} > '{out}' 2>&1 < /dev/null\n__rc=$?; echo $__rc > '{rc}'; (exit $__rc)")
    return "\n".join(parts) + "\n"


def run_document(source, build, work, doc, blocks, report):
    doc_dir = os.path.join(work, doc.replace("/", "_"))
    tmp = os.path.join(doc_dir, "tmp")
    home = os.path.join(doc_dir, "home")
    results = os.path.join(doc_dir, "results")
    for d in (tmp, home, results):
        os.makedirs(d)
    os.chmod(tmp, 0o1777)
    view = os.path.join(doc_dir, "repository")
    make_repository_view(source, build, view)
    runnable = []
    commands = {}
    for block in blocks:
        if block.marker.startswith("skip"):
            report.skipped.append(f"{block.where()}: {block.marker[4:].strip(' ()') or 'no reason given'}")
            continue
        if block.marker.startswith("file "):
            runnable.append((block.marker[5:].strip(), "\n".join(block.lines)))
            continue
        if block.marker and block.marker != "redis":
            report.fail(f"{block.where()}: unknown doc-test marker '{block.marker}' (known: skip (why), file PATH, redis)")
            continue
        if not block.is_example():
            continue
        runnable.append("new-block")
        for command in commands_of(block):
            commands[len(runnable)] = command
            runnable.append(command)
    if not commands:
        return
    env = {
        "PATH": f"{build}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }
    redis = None
    if any(c.block.marker == "redis" for c in commands.values()):
        if shutil.which("redis-server") is None:
            report.fail(f"{doc}: its examples need redis-server (tools/setup.sh installs it)")
            return
        redis = RedisServer(tmp)
    script = script_for(view, tmp, redis.port if redis else None, runnable, results)
    # Its own session, so that a hung example is stopped with all it started.
    shell = subprocess.Popen(["bash", "-c", script], env=env, cwd=doc_dir, start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        shell.wait(timeout=DOC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
        report.fail(f"{doc}: its examples did not finish in {DOC_TIMEOUT_S} s")
    finally:
        if redis:
            redis.stop()
    for n, command in commands.items():
        report.ran += 1
        where = f"{command.block.doc}:{command.line}"
        rc_file = os.path.join(results, f"{n}.rc")
        if not os.path.exists(rc_file):
            report.fail(f"{where}: never ran: {command.text}")
            continue
        status = int(read_text(rc_file))
        printed = read_text(os.path.join(results, f"{n}.out"))
        printed = printed.replace(tmp + "/", "/tmp/")
        problems = []
        if command.expected_exit is not None and status != command.expected_exit:
            problems.append(f"exit {status}, the document expects {command.expected_exit}"
                            + ("" if command.expected_exit else " (mark another with '# exit N: why')"))
        printed_lines = printed.split("\n")
        for shown in command.shown:
            if shown.strip() in ("", "...", "…"):
                continue
            if not shown_line_printed(shown, printed_lines):
                problems.append(f"does not print the line the document shows: {shown.strip()}")
        if problems:
            report.fail(f"{where}: $ {command.text}\n    " + "\n    ".join(problems)
                        + "\n    it printed:\n      " + "\n      ".join(printed.rstrip().split("\n")[-25:]))


# --- options named in the documents against each verb's --help ---

VERBS_WITH_SUBVERB = {"quarantine", "policy"}
PILLBOX_CALL_RE = re.compile(r"\bpillbox ((?:[a-z]+)(?: [a-z]+)?)((?:[^`\n|;&]|\\\n)*)")
OPTION_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def verb_of(words):
    parts = words.split(" ")
    if parts[0] in VERBS_WITH_SUBVERB and len(parts) > 1:
        return " ".join(parts[:2])
    return parts[0]


def help_of(build, verb, cache):
    if verb not in cache:
        r = subprocess.run([os.path.join(build, "pillbox")] + verb.split(" ") + ["--help"],
                           capture_output=True, text=True, timeout=20)
        cache[verb] = r.stdout + r.stderr if r.returncode == 0 else None
    return cache[verb]


def option_uses(source, doc, blocks):
    """(where, verb, option) for every option written after "pillbox VERB"."""
    uses = []
    texts = []
    for block in blocks:
        if block.is_example() or any(l.startswith("pillbox ") for l in block.lines):
            body = "\n".join(l[2:] if l.startswith("$ ") else l for l in block.lines
                             if l.startswith("$ ") or not block.is_transcript())
            texts.append((block.line, body))
    for n, line in enumerate(read_text(os.path.join(source, doc)).split("\n"), 1):
        for span in re.findall(r"`(pillbox [^`]+)`", line):
            texts.append((n, span))
    for line, text in texts:
        # Stop at an exec command ("-- CMD ARGS"): its options are the command's.
        for m in PILLBOX_CALL_RE.finditer(text):
            verb = verb_of(m.group(1))
            rest = re.split(r"\s--\s", m.group(2) + " ")[0]
            for option in OPTION_RE.findall(rest):
                uses.append((f"{doc}:{line}", verb, option))
    return uses


# Tables of options, each for one verb: (document, its section's heading, verb).
OPTION_TABLES = [
    ("README.md", "## Running tasks", "run"),
    ("docs/fuzzing.md", "## Options", "fuzz"),
    ("docs/policy-format.md", "### Command-line overrides", "run"),
]


def option_table_uses(source):
    uses = []
    for doc, heading, verb in OPTION_TABLES:
        lines = read_text(os.path.join(source, doc)).split("\n")
        if heading not in lines:
            uses.append((f"{doc}: no section '{heading}' (tests/docs/docs_examples_test.py, OPTION_TABLES)", verb, None))
            continue
        start = lines.index(heading)
        level = heading.split(" ")[0]
        for n in range(start + 1, len(lines)):
            if lines[n].startswith("#") and len(lines[n].split(" ")[0]) <= len(level):
                break
            if lines[n].startswith("| `--"):
                first_cell = lines[n].split(" | ")[0]
                for option in OPTION_RE.findall(first_cell):
                    uses.append((f"{doc}:{n + 1}", verb, option))
    return uses


def check_options(source, build, docs_blocks, report):
    cache = {}
    known_verbs = {"run", "fuzz", "reproduce", "minimize", "doctor", "submit", "worker", "quarantine list",
                   "quarantine show", "quarantine stats", "quarantine export", "quarantine discard",
                   "quarantine purge", "quarantine replay", "quarantine import", "quarantine patch", "policy check",
                   "policy show"}
    uses = option_table_uses(source)
    for doc, blocks in docs_blocks:
        uses += option_uses(source, doc, blocks)
    for where, verb, option in uses:
        if option is None:
            report.fail(where)
            continue
        if verb not in known_verbs:
            continue
        text = help_of(build, verb, cache)
        if text is None:
            report.fail(f"{where}: pillbox {verb} --help fails")
        elif option not in OPTION_RE.findall(text):
            report.fail(f"{where}: pillbox {verb} has no option {option} in its --help")
        else:
            report.options_checked += 1


# The store a command uses without --store, as README.md and docs/operator.md give it.
STORE_DEFAULT = "$PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else ~/.local/state/pillbox"


def check_store_defaults(build, report):
    cache = {}
    verbs = ["run", "fuzz", "reproduce", "minimize", "quarantine list", "quarantine import"]
    for verb in verbs:
        text = help_of(build, verb, cache) or ""
        if "--store DIR" not in text:
            report.fail(f"pillbox {verb} --help does not offer --store DIR")
        elif STORE_DEFAULT not in " ".join(text.split()):
            report.fail(f"pillbox {verb} --help does not give the store's default as the documents do: {STORE_DEFAULT}")


def check_duration_units(source, build, work, report):
    """The units a duration may have: what the parser says, what the documents list."""
    policy = os.path.join(work, "fractional.policy")
    with open(policy, "w") as f:
        f.write("[limits]\ncpu = 1.5s\n")
    r = subprocess.run([os.path.join(build, "pillbox"), "policy", "check", policy],
                       capture_output=True, text=True, timeout=20)
    m = re.search(r"write a whole number with a unit: ([^(]*)", r.stdout + r.stderr)
    if r.returncode != 2 or not m:
        report.fail(f"pillbox policy check with 'cpu = 1.5s': expected exit 2 naming the units, got "
                    f"{r.returncode}: {(r.stdout + r.stderr).strip()}")
        return
    units = re.findall(r"\d+([a-z]+)", m.group(1))
    table = read_text(os.path.join(source, "docs/policy-format.md"))
    table = table.split("### Durations", 1)[-1].split("\n#", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)`", table, re.M))
    for unit in units:
        if unit not in listed:
            report.fail(f"docs/policy-format.md, Durations: no row for the unit '{unit}', which durations accept "
                        f"({m.group(1).strip()})")


class Report:
    def __init__(self):
        self.failures = []
        self.skipped = []
        self.ran = 0
        self.options_checked = 0

    def fail(self, message):
        self.failures.append(message)

    def merge(self, other):
        self.failures += other.failures
        self.skipped += other.skipped
        self.ran += other.ran


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    source, build = (os.path.realpath(p) for p in sys.argv[1:])
    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    docs_blocks = [(doc, read_blocks(source, doc)) for doc in docs]
    report = Report()
    work = tempfile.mkdtemp(prefix="pillbox-docs-")
    # As root, tasks run under unprivileged slot uids: a plugin an example
    # builds here, or an input, must be reachable by them (docs/plugins.md).
    os.chmod(work, 0o755)
    try:
        # Documents run at once: each is one chain of commands, and the
        # longest (a 15 s fuzz session) would otherwise wait for the others.
        reports = [Report() for _ in docs_blocks]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(docs_blocks)) as pool:
            for future in [pool.submit(run_document, source, build, work, doc, blocks, r)
                           for (doc, blocks), r in zip(docs_blocks, reports)]:
                future.result()
        for r in reports:
            report.merge(r)
        check_options(source, build, docs_blocks, report)
        check_store_defaults(build, report)
        check_duration_units(source, build, work, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for s in report.skipped:
        print(f"skipped: {s}")
    for f in report.failures:
        print(f"FAILED: {f}")
    print(f"docs examples: {report.ran} commands run, {len(report.skipped)} blocks skipped, "
          f"{report.options_checked} option mentions checked, {len(report.failures)} failures")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
