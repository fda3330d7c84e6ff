"""The test lists of .ci/run name files that exist.

The VM's ASan tier once named tests/vm/test_mw.py after the file had
moved to tests/verbs/test_verbs_mw.py: pytest ran nothing there ("file
or directory not found") and the tier's report held no test.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _lists():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        text = f.read()
    return {m.group(1): m.group(2).split()
            for m in re.finditer(r'^([A-Z_]+_TESTS)="([^"]*)"', text, re.M)}


def test_ci_test_lists_name_existing_files():
    lists = _lists()
    assert {"FABRIC_ASAN_TESTS", "ASAN_TESTS"} <= set(lists), lists
    missing = [(name, t) for name, tests in lists.items() for t in tests
               if not os.path.exists(os.path.join(ROOT, t.split("::")[0]))]
    assert not missing, missing


def test_ci_test_lists_have_no_repeats():
    for name, tests in _lists().items():
        assert len(tests) == len(set(tests)), (name, tests)
