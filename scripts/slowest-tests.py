#!/usr/bin/env python3
"""Prints the N slowest tests of a cargo-nextest JUnit report, with their
binary and time, and the sum of every test's time against the wall time of
the run (how much the tests overlapped).

Usage: scripts/slowest-tests.py JUNIT_XML [N]
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) == 3 else 20
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"no test times: cannot read {path}: {e}", file=sys.stderr)
        return 1
    cases = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            cases.append((float(case.get("time", "0")), suite.get("name", "?"), case.get("name", "?"), failed))
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
