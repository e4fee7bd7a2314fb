#!/usr/bin/env python3
"""Prints the N slowest tests of a cargo-nextest JUnit report, with their
binary and time, and the sum of every test's time against the wall time of
the run (how much the tests overlapped). With --failures FILE, it also
writes to FILE why each failed test failed: the lines of its output from
"panicked at" on, a few per test (CI prints them last, where a long
failing test's output would otherwise hide them).

Usage: scripts/slowest-tests.py JUNIT_XML [N] [--failures FILE]
"""
import sys
import xml.etree.ElementTree as ET


def why(case: ET.Element, lines: int = 12) -> list[str]:
    """The panic of a failed test case: from its first "panicked at" line
    on, at most `lines` lines of at most 400 characters."""
    texts = [e.text or "" for tag in ("failure", "error", "system-out", "system-err")
             for e in case.iter(tag)]
    for text in texts:
        found = text.split("\n")
        for i, line in enumerate(found):
            if "panicked at" in line:
                return [l[:400] for l in found[i:i + lines]]
    for e in case.iter("failure"):
        if e.get("message"):
            return [e.get("message")[:400]]
    return ["(no panic message in the report)"]


def main() -> int:
    args = sys.argv[1:]
    failures = None
    if "--failures" in args:
        at = args.index("--failures")
        if at + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        failures = args[at + 1]
        del args[at:at + 2]
    if len(args) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    path = args[0]
    count = int(args[1]) if len(args) == 2 else 20
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"no test times: cannot read {path}: {e}", file=sys.stderr)
        return 1
    cases = []
    digest = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            cases.append((float(case.get("time", "0")), suite.get("name", "?"), case.get("name", "?"), failed))
            if failed:
                digest.append(f"{suite.get('name', '?')}  {case.get('name', '?')}")
                digest.extend("    " + line for line in why(case))
    if failures is not None:
        with open(failures, "w") as out:
            out.write("".join(line + "\n" for line in digest))
    cases.sort(reverse=True)
    total = sum(c[0] for c in cases)
    wall = float(root.get("time", "0"))
    print(f"== the {min(count, len(cases))} slowest of {len(cases)} tests "
          f"(their times add up to {total:.0f} s in {wall:.0f} s of wall time)")
    for seconds, suite, name, failed in cases[:count]:
        mark = "  FAILED" if failed else ""
        print(f"{seconds:8.1f}s  {suite}  {name}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
