"""A hostile host cannot run code on the hosts it is paired with.

Two simulated hosts (network namespaces); the test plays the controller
and relays, as the engine does, what one end returned from ``hello`` to
the other end's ``connect`` step, but first replaces that end's half of
the path as a compromised host could: with a pickle whose loading runs a
command, or with fields of the wrong type, range or name.  The receiving
host must refuse each with an error naming the problem, run nothing, and
still connect when the genuine half comes."""
import os
import pickle

import pytest

from conftest import run_env
from rdma.multihost.command import host_specs
from rdma.multihost.hosts import CheckError, start_hosts, stop_hosts


class _RunsCommand:
    """Unpickling this runs a shell command (what an attacker would send)."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


@pytest.fixture
def two_hosts(make_cluster, monkeypatch):
    for k, v in run_env().items():
        monkeypatch.setenv(k, v)
    c = make_cluster(2)
    group, hosts = start_hosts(host_specs(c.specs()), timeout=120)
    try:
        bad = [f"{h.name}: {h.dead or h.info.get('problem')}"
               for h in hosts if not h.usable]
        assert not bad, bad
        yield hosts
    finally:
        stop_hosts(group, hosts)


def _begin(hosts, key):
    params = {"qp_type": 2, "size": 4096, "depth": 16,
              "hosts": [hosts[0].name, hosts[1].name], "timeout": 30}
    return [h.call("pair_begin", 60, key=key, check="qp", role=r,
                   params=params) for h, r in zip(hosts, ("a", "b"))]


def _connect_error(host, key, peer):
    with pytest.raises(CheckError) as e:
        host.call("pair_step", 60, key=key, step="connect", peer=peer)
    return str(e.value)


def test_peer_pickle_is_not_loaded(two_hosts, tmp_path):
    """A half path that is a pickle running ``touch`` is refused as not
    being a dictionary, and the file is never made."""
    a, b = two_hosts
    marker = tmp_path / "ran"
    ha, hb = _begin(two_hosts, 1)
    evil = dict(hb, path=pickle.dumps(_RunsCommand(f"touch {marker}")))
    msg = _connect_error(a, 1, evil)
    assert "bytes" in msg and "not a dictionary" in msg, msg
    assert not marker.exists(), "the peer's pickle ran on the host"


@pytest.mark.parametrize("field,value,words", [
    ("sqpn", "12", "sqpn='12': not an integer"),
    ("sqpn", 1 << 24, "sqpn=16777216: not an integer in 0x0..0xffffff"),
    ("MTU", 9, "MTU=9"),
    ("has_grh", 1, "has_grh=1: not a bool"),
    ("SGID", "fe80::1", "not a GID of 32 hex digits"),
    ("end_port", 1, "unknown path field 'end_port'"),
    ("__class__", "x", "unknown path field '__class__'"),
])
def test_peer_fields_are_checked(two_hosts, field, value, words):
    """Each field of the peer's half is checked for its name, type and
    range before any of it is used; the genuine half connects after."""
    a, b = two_hosts
    ha, hb = _begin(two_hosts, 2)
    bad = dict(hb, path=dict(hb["path"], **{field: value}))
    msg = _connect_error(a, 2, bad)
    assert words in msg, msg
    assert a.call("pair_step", 60, key=2, step="connect", peer=hb)
    assert b.call("pair_step", 60, key=2, step="connect", peer=ha)
