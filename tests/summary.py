"""Add up JUnit XML reports: ``python tests/summary.py NAME=FILE ...``.

Prints one line per tier and a closing ``N passed, N failed, N skipped``
line; exits 1 if any test failed or errored, or a report is missing.
"""
import sys
import xml.etree.ElementTree as ET


def count(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    t = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in suites:
        for k in t:
            t[k] += int(s.get(k, 0))
    return t


def main(args):
    total = {"passed": 0, "failed": 0, "skipped": 0}
    ok = True
    for arg in args:
        name, _, path = arg.partition("=")
        try:
            t = count(path)
        except (OSError, ET.ParseError) as e:
            print(f"{name}: no report ({e})")
            ok = False
            continue
        failed = t["failures"] + t["errors"]
        passed = t["tests"] - failed - t["skipped"]
        print(f"{name}: {passed} passed, {failed} failed, {t['skipped']} "
              "skipped")
        total["passed"] += passed
        total["failed"] += failed
        total["skipped"] += t["skipped"]
        ok = ok and failed == 0
    print(f"{total['passed']} passed, {total['failed']} failed, "
          f"{total['skipped']} skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
