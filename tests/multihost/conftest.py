"""Simulated hosts for the multi-host tests: network namespaces on a
bridge (netns.py).  Tests that need them skip, with the reason, when not
root.  Every cluster is removed afterwards, whatever happened."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from netns import Cluster, why_not  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def run_env() -> dict:
    """The environment of a ``python -m rdma`` child: this checkout first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


@pytest.fixture
def make_cluster():
    """A factory of :class:`netns.Cluster`; all closed (and checked gone)
    at the end of the test."""
    problem = why_not()
    if problem:
        pytest.skip(problem)
    made = []

    def make(n, **kw):
        c = Cluster(n, **kw)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()
        assert c.leftovers() == [], f"not cleaned up: {c.leftovers()}"


@pytest.fixture
def unprivileged_skip_message(monkeypatch, request):
    """The skip message make_cluster gives an unprivileged process."""
    import netns
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    try:
        request.getfixturevalue("make_cluster")
    except pytest.skip.Exception as e:
        return str(e)
    raise AssertionError("make_cluster did not skip")
