"""Add up JUnit XML reports:
``python tests/summary.py [--times FILE] NAME=FILE ...``.

Prints one line per tier and a closing ``N passed, N failed, N skipped``
line; exits 1 if any test failed or errored, or a report is missing.

Each tier's line ends with how long the tier took.  ``--times FILE``
names the marks ``.ci/run`` writes, one ``NAME SECONDS`` line (seconds
since the epoch) when each step starts and ``end`` when the last one
has ended: a step lasts until the next mark.  A tier with no mark
shows the time its report gives (pytest writes one), if any.  Then a
``time per step`` table lists every marked step (those without a report
too, such as building the variants) and the total, so that a slow tier
shows up before it makes the suite outgrow CI's limit.
"""
import sys
import xml.etree.ElementTree as ET


def count(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    t = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for s in suites:
        for k in t:
            if k == "time":
                try:
                    t[k] += float(s.get(k, 0))
                except ValueError:
                    pass
            else:
                t[k] += int(s.get(k, 0))
    return t


def read_marks(path):
    """The steps of a marks file in order: ``[(name, seconds)]`` (the
    last step ends at the ``end`` mark; a step without a next mark has
    no duration and is left out)."""
    marks = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2:
                continue
            try:
                marks.append((parts[0], float(parts[1])))
            except ValueError:
                continue
    steps = []
    for (name, t0), (_, t1) in zip(marks, marks[1:]):
        if name != "end":
            steps.append((name, max(0.0, t1 - t0)))
    return steps


def duration(seconds):
    """``1h02m03s``, ``4m05s`` or ``6s``."""
    s = int(round(seconds))
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def main(args):
    times_file = None
    if args[:1] == ["--times"]:
        if len(args) < 2:
            print("summary.py: --times needs a file", file=sys.stderr)
            return 2
        times_file, args = args[1], args[2:]
    steps = []
    if times_file is not None:
        try:
            steps = read_marks(times_file)
        except OSError as e:
            print(f"time per step: no marks ({e})")
    took = {}
    for name, secs in steps:
        took[name] = took.get(name, 0.0) + secs
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
        if name in took:
            when = f" in {duration(took[name])}"
        elif t["time"] > 0:
            when = f" in {duration(t['time'])} (its report's time)"
        else:
            when = ""
        print(f"{name}: {passed} passed, {failed} failed, "
              f"{t['skipped']} skipped{when}")
        total["passed"] += passed
        total["failed"] += failed
        total["skipped"] += t["skipped"]
        ok = ok and failed == 0
    if steps:
        print("time per step:")
        width = max(len(n) for n, _ in steps)
        for name, secs in steps:
            print(f"  {name:<{width}} {duration(secs):>9}")
        print(f"  {'total':<{width}} "
              f"{duration(sum(s for _, s in steps)):>9}")
    print(f"{total['passed']} passed, {total['failed']} failed, "
          f"{total['skipped']} skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
