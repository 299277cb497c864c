#!/usr/bin/env python3
"""A small record parser with the bugs real parsers have (samples/README.md).

Reads one record file ("name: value" lines) and prints it as JSON. Some
inputs make it fail the way Python programs do: an exception with a
traceback on stderr and exit code 1. pillbox turns each traceback into a
crash state (the raising frames) and a fingerprint that ignores the
volatile parts of the message, so records that hit one bug group together.
"""
import json
import sys


def parse_amount(text):
    if not text.strip().lstrip("-").isdigit():
        raise ValueError(f"bad amount {text!r}")
    return int(text)


def parse_line(line):
    name, sep, value = line.partition(":")
    if not sep:
        raise KeyError(f"no separator in line {line!r}")
    name = name.strip()
    value = value.strip()
    if name == "amount":
        return name, parse_amount(value)
    return name, value


def main(path):
    with open(path, encoding="utf-8") as f:
        record = dict(parse_line(line) for line in f if line.strip())
    print(json.dumps(record, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
