#!/usr/bin/env python3
"""Checks docs_examples_test.py itself: that it reads the blocks the way the
documents write them, and that it fails when an example's exit code or
output is not what the document shows, or when an example hangs. A test that
cannot fail proves nothing; these documents are made to fail it."""

import os
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_examples_test as doctest_runner  # noqa: E402


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))


class ReadingBlocks(unittest.TestCase):
    def blocks_of(self, markdown):
        with tempfile.TemporaryDirectory() as source:
            write(os.path.join(source, "doc.md"), markdown)
            return doctest_runner.read_blocks(source, "doc.md")

    def test_fenced_indented_and_markers(self):
        blocks = self.blocks_of("""\
            Text.

            <!-- doc-test: skip (no reason) -->
            ```sh
            pillbox run x
            ```

            A synopsis:

                pillbox quarantine show ID [--json]

            <!-- doc-test: skip (cleared by the paragraph below) -->
            A paragraph.

                $ pillbox quarantine list
                ID  KEY

            ```
            plain output, not an example
            ```
            """)
        self.assertEqual([b.tag for b in blocks], ["sh", "", "", ""])
        self.assertEqual(blocks[0].marker, "skip (no reason)")
        self.assertTrue(blocks[0].is_example())
        self.assertFalse(blocks[1].is_example())
        self.assertEqual(blocks[2].marker, "")
        self.assertTrue(blocks[2].is_transcript())
        self.assertFalse(blocks[3].is_example())

    def test_commands_exit_codes_and_shown_output(self):
        blocks = self.blocks_of("""\
            ```sh
            $ pillbox fuzz seeds/ \\
                  --max-time 1s
            pillbox fuzz: 1 seed
            $ echo $?
            1
            # narration
            $ pillbox run x   # exit 2: no such input
            ```
            """)
        commands = doctest_runner.commands_of(blocks[0])
        self.assertEqual([c.text for c in commands],
                         ["pillbox fuzz seeds/ \\\n      --max-time 1s", "echo $?", "pillbox run x   # exit 2: no such input"])
        self.assertIsNone(commands[0].expected_exit)  # "echo $?" shows it
        self.assertEqual(commands[0].shown, ["pillbox fuzz: 1 seed"])
        self.assertEqual(commands[1].shown, ["1"])
        self.assertEqual(commands[2].expected_exit, 2)


class ComparingOutput(unittest.TestCase):
    def test_what_differs_between_runs_is_ignored(self):
        shown = "1        2026-11-30T23:27:14.102Z quarantined  crash   pb1-90d1bb1e2f4f80c3  fuzz:e5bd4de2d8b7bd05/pb1-90d1bb1e2f4f80c3"
        printed = "12       2026-12-02T00:09:56.170Z quarantined  crash             pb1-0123456789abcdef  fuzz:0717f0283b3ebdab/pb1-0123456789abcdef"
        self.assertTrue(doctest_runner.shown_line_printed(shown, [printed]))
        self.assertTrue(doctest_runner.shown_line_printed("1 new record, 7 repeats", ["2 new records, 1 repeat"]))
        # A mutation list cut short just after a separator (seen in CI).
        self.assertTrue(doctest_runner.shown_line_printed(
            "new fingerprint record 1: crash pb1-90d1bb1e2f4f80c3 (4 bytes, from input /tmp/fz/seeds/hello, run 52, "
            "mutations: arith-16,delete-block,flip-bit,dict-overwrite)",
            ["new fingerprint record 1: crash pb1-90d1bb1e2f4f80c3 (129 bytes, from input /tmp/fz/seeds/hello, run 15, "
             "mutations: flip-byte,insert-random,dict-insert,dict-overwrite,~)"]))
        self.assertTrue(doctest_runner.shown_line_printed("(mutations: a | b)", ["(mutations: a | b |~)"]))
        self.assertFalse(doctest_runner.shown_line_printed("(mutations: a)", ["(mutations: a, from x)"]))

    def test_what_matters_is_not(self):
        # A key format, a file name, a status, a policy name.
        self.assertFalse(doctest_runner.shown_line_printed(
            "1  2026-11-30T23:27:14.102Z quarantined crash pb1-90d1bb1e2f4f80c3 fuzz:e5bd4de2d8b7bd05",
            ["1  2026-11-30T23:27:14.102Z quarantined crash pb1-90d1bb1e2f4f80c3 fuzz:e5bd4de2d8b7bd05/pb1-90d1bb1e2f4f80c3"]))
        self.assertFalse(doctest_runner.shown_line_printed("results/a_b.out", ["a_b.out"]))
        self.assertFalse(doctest_runner.shown_line_printed("1 resolved", ["1 failed again"]))
        self.assertFalse(doctest_runner.shown_line_printed("(shipped: default, exec, strict)", ["(shipped: exec, strict)"]))

    def test_an_ellipsis_stands_for_any_text(self):
        self.assertTrue(doctest_runner.shown_line_printed("command '.../build/x'", ["command '/work/wt/build/x'"]))
        self.assertFalse(doctest_runner.shown_line_printed("command '.../build/x'", ["command '/work/wt/build/y'"]))


class RunningDocuments(unittest.TestCase):
    """Documents run against a stand-in pillbox (a shell script)."""

    def run_doc(self, markdown, timeout_s=None):
        with tempfile.TemporaryDirectory() as work:
            source = os.path.join(work, "source")
            build = os.path.join(work, "build")
            write(os.path.join(source, "doc.md"), markdown)
            write(os.path.join(build, "pillbox"), """\
                #!/bin/sh
                case "$1" in
                  fail) echo "it failed" >&2; exit 1 ;;
                  hang) exec sleep 600 ;;
                  *) echo "record 1: $*" ;;
                esac
                """)
            os.chmod(os.path.join(build, "pillbox"), 0o755)
            report = doctest_runner.Report()
            saved = doctest_runner.DOC_TIMEOUT_S
            if timeout_s is not None:
                doctest_runner.DOC_TIMEOUT_S = timeout_s
            try:
                doctest_runner.run_document(source, build, os.path.join(work, "run"), "doc.md",
                                            doctest_runner.read_blocks(source, "doc.md"), report)
            finally:
                doctest_runner.DOC_TIMEOUT_S = saved
            return report

    def test_a_document_that_matches_passes(self):
        report = self.run_doc("""\
            <!-- doc-test: file /tmp/x/input -->
            ```
            some input
            ```

            ```console
            $ cat /tmp/x/input
            some input
            $ pillbox show 7
            record 1: show 7
            $ pillbox fail
            it failed
            $ echo $?
            1
            $ pillbox fail   # exit 1: shown by a comment
            ```

            <!-- doc-test: skip (a reason) -->
            ```sh
            pillbox hang
            ```
            """)
        self.assertEqual(report.failures, [])
        self.assertEqual(report.ran, 5)
        self.assertEqual(report.skipped, ["doc.md:20: a reason"])

    def test_a_wrong_exit_code_or_output_fails(self):
        report = self.run_doc("""\
            ```console
            $ pillbox fail
            $ pillbox show 7
            record 1: list 7
            $ pillbox show 7   # exit 1
            ```
            """)
        self.assertEqual(len(report.failures), 3, report.failures)
        self.assertIn("exit 1, the document expects 0", report.failures[0])
        self.assertIn("does not print the line the document shows: record 1: list 7", report.failures[1])
        self.assertIn("exit 0, the document expects 1", report.failures[2])

    def test_an_unknown_marker_fails(self):
        report = self.run_doc("""\
            <!-- doc-test: skp (typo) -->
            ```sh
            pillbox show 1
            ```
            """)
        self.assertEqual(len(report.failures), 1)
        self.assertIn("unknown doc-test marker 'skp (typo)'", report.failures[0])

    def test_a_hanging_example_is_stopped_and_fails(self):
        started = time.monotonic()
        report = self.run_doc("""\
            ```sh
            pillbox hang
            pillbox show 1
            ```
            """, timeout_s=2)
        self.assertLess(time.monotonic() - started, 30)
        self.assertTrue(any("did not finish in 2 s" in f for f in report.failures), report.failures)
        self.assertTrue(any("never ran: pillbox show 1" in f for f in report.failures), report.failures)


if __name__ == "__main__":
    unittest.main()
