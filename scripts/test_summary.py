#!/usr/bin/env python3
"""Prints 'N passed, N failed' for a `bazel test` run and exits non-zero on any failure.

Before the count, each failed target's log lines that say why (why_failed), so that the end of the output names
the reason as well as the test.

Counts test cases from each test target's JUnit XML; a target that failed to build, timed out or crashed
without a usable XML counts as one failed case. Usage: test_summary.py BAZEL_LOG TESTLOGS_DIR BAZEL_RC [CHECKS]

CHECKS (optional): a file of lines "PASSED name" / "FAILED name", checks run outside Bazel (scripts/test.sh's
package checks), each counted as one case.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

# A failed target's log lines shown again beside the summary (CI keeps the head and tail of long output, so the
# reason must sit at the end): lines that say why, the last KEEP of them, each cut to WIDTH characters.
WHY = re.compile(r"FAIL|[Ff]ailed|Failure|Assertion|Error|error:|Traceback|differs|timed out")
KEEP, WIDTH = 12, 300


def why_failed(testlogs, target):
    """The last lines of `target`'s test.log that say why it failed."""
    path = os.path.join(testlogs, target[2:].replace(":", "/"), "test.log")
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip()[:WIDTH] for line in f if WHY.search(line)]
    except OSError:
        return []
    return lines[-KEEP:]


def main():
    log_path, testlogs, bazel_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    targets = {}
    pattern = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD)")
    with open(log_path, errors="replace") as f:
        for line in f:
            m = pattern.match(line.strip())
            if m:
                targets[m.group(1)] = m.group(2)
    passed = failed = skipped = 0
    if len(sys.argv) > 4:
        with open(sys.argv[4]) as f:
            for line in f:
                state, _, name = line.strip().partition(" ")
                if state == "PASSED":
                    passed += 1
                elif state == "FAILED":
                    failed += 1
                    print(f"FAILED: {name}")
    for target, state in sorted(targets.items()):
        xml_path = os.path.join(testlogs, target[2:].replace(":", "/"), "test.xml")
        cases = []
        if state in ("PASSED", "FAILED", "FLAKY") and os.path.exists(xml_path):
            try:
                cases = ET.parse(xml_path).getroot().iter("testcase")
                cases = list(cases)
            except ET.ParseError:
                cases = []
        if not cases:
            if state == "PASSED":
                passed += 1
            else:
                failed += 1
                print(f"FAILED: {target} ({state})")
            continue
        for case in cases:
            name = f"{target} {case.get('classname')}.{case.get('name')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                print(f"FAILED: {name}")
            elif case.find("skipped") is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
        if state != "PASSED" and not any(c.find("failure") is not None for c in cases):
            failed += 1
            print(f"FAILED: {target} ({state})")
    for target, state in sorted(targets.items()):
        if state not in ("PASSED", "FLAKY"):
            for line in why_failed(testlogs, target):
                print(f"  {target}: {line}")
    if not targets:
        failed += 1
        print("FAILED: bazel ran no test (see the log above)")
    elif bazel_rc not in (0, 3) and failed == 0:
        # 3 = some tests failed (counted above); anything else is a build or infrastructure failure.
        failed += 1
        print(f"FAILED: bazel exited with {bazel_rc}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
