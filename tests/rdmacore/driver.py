"""Run rdma-core's provider test suite from SUITE_DIR as its own
``run_tests.py`` does, and record each test's outcome in OUT_JSON::

    /usr/bin/python3 driver.py SUITE_DIR OUT_JSON [run_tests.py options]

Run by tests/rdmacore/run_suite.py with Debian's /usr/bin/python3 (the
one python3-pyverbs works with).  The suite is not changed: this does
what its run_tests.py does (load its package, parse its options, run
unittest's main on it) with a test runner that also writes the outcomes:
{"tests": {id: {"status": ..., "detail": ...}}, "seconds": ...}, status
one of ok, fail, error, skip, xfail, xpass.
"""
import json
import os
import sys
import time
import unittest
from importlib.machinery import SourceFileLoader


class Recorder(unittest.TextTestResult):
    """The text result unittest prints, and each test's outcome."""

    outcomes = {}

    def _put(self, test, status, detail=""):
        tid = test.id()
        old = self.outcomes.get(tid)
        # a failing subtest makes its test fail, whatever comes after
        if old is not None and old["status"] in ("fail", "error"):
            return
        self.outcomes[tid] = {"status": status, "detail": detail}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        # an error in setUpClass and the like is reported on a
        # _ErrorHolder whose id names the class
        self._put(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "xfail", self._exc_info_to_string(err, test))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = ("fail" if issubclass(err[0], test.failureException)
                    else "error")
            self._put(test, kind, self._exc_info_to_string(err, test))


class Runner(unittest.TextTestRunner):
    resultclass = Recorder


def main():
    suite_dir, out = sys.argv[1], sys.argv[2]
    sys.argv = [os.path.join(suite_dir, "run_tests.py")] + sys.argv[3:]
    sys.path.insert(0, suite_dir)
    from args_parser import parser
    tests = SourceFileLoader(
        "tests", os.path.join(suite_dir, "__init__.py")).load_module()
    parser.parse_args()
    start = time.monotonic()
    prog = unittest.main(module=tests, testRunner=Runner, exit=False)
    seconds = time.monotonic() - start
    with open(out, "w") as f:
        json.dump({"tests": Recorder.outcomes, "seconds": seconds}, f,
                  indent=1, sort_keys=True)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
