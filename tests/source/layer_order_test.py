#!/usr/bin/env python3
"""The supervisor's folders include only downward.

docs/architecture.md ("The source tree") names the layers, bottom to top,
between <!-- layers --> markers; this test reads them there (so the order is
written once) and fails, naming file and line, on every
`#include "supervisor/X/..."` in supervisor/Y/ where X is above Y, and on a
folder the order does not name.

Usage: layer_order_test.py SOURCE_DIR
"""
import pathlib
import re
import sys


def declared_layers(architecture: str) -> list[str]:
    m = re.search(r"<!-- layers -->\s*\n(.*?)\n\s*<!-- /layers -->", architecture, re.S)
    if not m:
        sys.exit("docs/architecture.md has no <!-- layers --> ... <!-- /layers --> block")
    return re.findall(r"`([a-z_]+)`", m.group(1))


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    layers = declared_layers((root / "docs" / "architecture.md").read_text())
    rank = {name: i for i, name in enumerate(layers)}
    folders = sorted(p.name for p in (root / "supervisor").iterdir() if p.is_dir())
    problems = [f"supervisor/{f}/ is not in the layer order of docs/architecture.md" for f in folders
                if f not in rank]
    problems += [f"docs/architecture.md names layer '{name}' but supervisor/{name}/ does not exist"
                 for name in layers if name not in folders]
    include = re.compile(r'^\s*#\s*include\s+"supervisor/([a-z_]+)/')
    checked = 0
    for path in sorted((root / "supervisor").rglob("*")):
        if path.suffix not in (".h", ".cpp") or not path.is_file():
            continue
        here = path.relative_to(root / "supervisor").parts[0]
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = include.match(line)
            if not m:
                continue
            checked += 1
            there = m.group(1)
            if here in rank and there in rank and rank[there] > rank[here]:
                problems.append(f"{path.relative_to(root)}:{number}: {here}/ includes {there}/, a layer above it")
    for p in problems:
        print(p)
    print(f"{checked} includes between supervisor folders checked against {len(layers)} layers: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
