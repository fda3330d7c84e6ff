"""tests/summary.py, the closing summary of ``.ci/run test``: counts per
tier, and how long each step of the run took."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "tests" / "summary.py"


def _report(path, tests, failures=0, skipped=0, time=None):
    t = f' time="{time}"' if time is not None else ""
    path.write_text(
        f'<?xml version="1.0"?><testsuites><testsuite name="pytest" '
        f'tests="{tests}" failures="{failures}" errors="0" '
        f'skipped="{skipped}"{t}></testsuite></testsuites>')
    return path


def _run(*args):
    return subprocess.run([sys.executable, str(SUMMARY), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_each_tier_says_how_long_it_took(tmp_path):
    """The marks .ci/run writes give each step's time: on its tier's line
    and in a table with the steps that have no report (building the
    variants) and the total."""
    host = _report(tmp_path / "host.xml", 10, skipped=1, time=100.0)
    sa = _report(tmp_path / "sa.xml", 5, time=200.5)
    other = _report(tmp_path / "other.xml", 3)
    times = tmp_path / "times"
    t0 = 1_800_000_000
    times.write_text(f"variants {t0}\nhost {t0 + 40}\nsa {t0 + 160}\n"
                     f"end {t0 + 3905}\n")
    res = _run("--times", times, f"host={host}", f"sa={sa}",
               f"other={other}")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "host: 9 passed, 0 failed, 1 skipped in 2m00s" in lines
    assert "sa: 5 passed, 0 failed, 0 skipped in 1h02m25s" in lines
    assert "other: 3 passed, 0 failed, 0 skipped" in lines
    table = lines[lines.index("time per step:") + 1:]
    assert [x.split() for x in table[:4]] == [
        ["variants", "40s"], ["host", "2m00s"], ["sa", "1h02m25s"],
        ["total", "1h05m05s"]]
    assert lines[-1] == "17 passed, 0 failed, 1 skipped"


def test_without_marks_the_reports_time_is_shown(tmp_path):
    """Run by hand without --times: pytest's own time from the report."""
    host = _report(tmp_path / "host.xml", 4, failures=1, time=61.2)
    res = _run(f"host={host}")
    assert res.returncode == 1
    assert "host: 3 passed, 1 failed, 0 skipped in 1m01s (its report's " \
        "time)" in res.stdout.splitlines()
    assert "time per step:" not in res.stdout


def test_a_missing_marks_file_or_report_is_reported(tmp_path):
    res = _run("--times", tmp_path / "nothing", f"host={tmp_path / 'no.xml'}")
    assert res.returncode == 1
    assert "time per step: no marks" in res.stdout
    assert "host: no report" in res.stdout
