"""Shared fixtures of the host tier (no RDMA device needed)."""
import sys

import pytest

from host_helpers import ROOT

sys.path.insert(0, str(ROOT / "tests"))
# Its asserts get pytest's messages; registered before anything imports it.
pytest.register_assert_rewrite("verbs_fixtures", "fabric_helpers")


@pytest.fixture(scope="session")
def linked_variant():
    """The linked build of the extension (build/variants/linked): the
    one .ci/run's first step built, if the sources are unchanged since."""
    import variants
    return variants.current("linked")
