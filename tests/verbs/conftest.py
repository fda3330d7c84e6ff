"""The behavioural verbs tests, run once per provider.

Every test that takes the ``provider`` fixture (directly or through
``end_port``, ``ctx``, ``pair_factory``...) runs against each provider of
:data:`PROVIDERS`:

* ``verbs`` (rdma-core) where an rdma-core device is there to test: inside
  the Soft-RoCE VM (``RDMA_TESTVM=1``, device rxe0, GID index 1);
* ``ucx``, the software fabric, everywhere (device ucx0).  It runs over
  whatever ``UCX_TLS`` selects; UCX reads it once per process, so the TCP
  run is a separate invocation::

      python -m pytest tests/verbs                                 # shm
      UCX_TLS=tcp UCX_NET_DEVICES=lo python -m pytest tests/verbs  # tcp

``RDMA_TEST_PROVIDERS=verbs,ucx`` overrides the list (CI sets ``verbs`` in
the VM, where the fabric already ran on the host).  Where the fabric
legitimately differs from rxe a test says so with
:func:`verbs_fixtures.differs`; docs/fabric.rst lists every difference.
"""
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE))
# Its asserts get pytest's messages; registered before anything imports it.
pytest.register_assert_rewrite("verbs_fixtures", "fabric_helpers")
# ctx and variant (fixtures shared with the other tier) come from there
from verbs_fixtures import ctx, variant  # noqa: E402,F401

IN_VM = os.environ.get("RDMA_TESTVM") == "1"


def _providers():
    env = os.environ.get("RDMA_TEST_PROVIDERS")
    if env:
        return [p for p in env.split(",") if p]
    return (["verbs"] if IN_VM else []) + ["ucx"]


#: The providers this run tests, in order.
PROVIDERS = _providers()


@pytest.fixture(scope="session", params=PROVIDERS)
def provider(request):
    """The provider under test: "verbs" (rxe in the VM) or "ucx"."""
    return request.param


@pytest.fixture(scope="session")
def gid_index(provider):
    """The GID index the tests address with on this provider."""
    import verbs_fixtures
    return verbs_fixtures.GID_INDEXES[provider]


@pytest.fixture(scope="session")
def end_port(provider):
    import verbs_fixtures
    return verbs_fixtures.open_end_port(provider)


def pytest_report_header(config):
    tls = os.environ.get("UCX_TLS", "UCX default (shared memory)")
    return [f"verbs providers: {', '.join(PROVIDERS)}; ucx transport: {tls}"]
