"""``ibtool pingpong`` and ``ibtool perf`` between two processes on the host,
over the software fabric (the UCX provider).  Skipped, with the reason,
while this build has no UCX provider or it lists no device."""
import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest

import fabric_helpers as fh

ENV = {"RDMA_PROVIDER": "ucx", "UCX_WARN_UNUSED_ENV_VARS": "n"}
T = 120


def _fabric_missing():
    res = subprocess.run([sys.executable, "-m", "rdma", "devices"],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, **ENV))
    if res.returncode != 0:
        return ("the software fabric (UCX provider) is not available: "
                + (res.stderr.strip() or f"exit {res.returncode}"))
    if len(res.stdout.strip().splitlines()) < 3:
        return "the software fabric (UCX provider) lists no device"
    return None


_REASON = _fabric_missing()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


free_port = fh.free_port


def rdma(*args):
    return [sys.executable, "-m", "rdma", *args]


def pair(server_cmd, client_cmd, port):
    """fabric_helpers.pair on the fabric (ENV), with this file's timeout."""
    return fh.pair(server_cmd, client_cmd, port, dict(os.environ, **ENV),
                   timeout=T)


@pytest.mark.parametrize("mode", ["rc", "uc", "ud", "srq"])
def test_pingpong_on_the_fabric(mode):
    port = free_port()
    extra = ["-q", "4"] if mode == "srq" else []
    args = ["pingpong", mode, "-n", "200", "-c", "-p", str(port),
            "--timeout", "30", *extra]
    srv, cli = pair(rdma(*args), rdma(*args, "127.0.0.1"), port)
    for rc, out, err in (srv, cli):
        assert rc == 0, out + err
        assert re.search(r"^200 iters in [\d.]+ seconds = [\d.]+ usec/iter$",
                         out, re.M), out


@pytest.mark.parametrize("mode", ["bw", "lat"])
@pytest.mark.parametrize("test", ["write", "read", "send", "atomic"])
def test_perf_on_the_fabric(test, mode):
    port = free_port()
    common = ["perf", test, "-p", str(port), "--timeout", "30"]
    srv, cli = pair(rdma(*common, "--output", "json"),
                    rdma(*common, f"--{mode}", "-n", "200", "-c",
                         "--output", "csv", "127.0.0.1"), port)
    assert srv[0] == 0 and cli[0] == 0, srv[2] + cli[2]
    rows = list(csv.DictReader(io.StringIO(cli[1])))
    assert len(rows) == 1 and int(rows[0]["iterations"]) == 200
    assert json.loads(srv[1])["results"][0]["iterations"] == 200


@pytest.mark.parametrize("lb", ["dqplb", "spray"])
def test_perf_striped_over_a_virtual_qp(lb):
    """``perf write --qps 3 --mode LB``: each row has the VirtualQP's
    bandwidth next to the single QP's of the same run; a fragment that
    does not divide the message; both sides check the data (-c) and
    print the same rows."""
    port = free_port()
    common = ["perf", "write", "-p", str(port), "--timeout", "30", "--json"]
    srv, cli = pair(rdma(*common),
                    rdma(*common, "--qps", "3", "--mode", lb, "--fragment",
                         "5000", "-a", "--max-size", "65536", "-n", "40",
                         "-t", "16", "-c", "127.0.0.1"), port)
    assert srv[0] == 0 and cli[0] == 0, srv[2] + cli[2]
    res = json.loads(cli[1])
    assert (res["qps"], res["lb_mode"], res["fragment"]) == (3, lb, 5000)
    assert [r["bytes"] for r in res["results"]] == \
        [1 << k for k in range(1, 17)]
    for row in res["results"]:
        assert row["qps"] == 3 and row["lb_mode"] == lb
        assert row["iterations"] == 40
        for k in ("bw_avg_mb_s", "single_bw_avg_mb_s", "speedup"):
            assert row[k] > 0, (k, row)
        assert row["speedup"] == pytest.approx(
            row["bw_avg_mb_s"] / row["single_bw_avg_mb_s"])
    assert json.loads(srv[1])["results"] == res["results"]


@pytest.mark.parametrize("args,msg", [
    (["read", "--qps", "2"], "RDMA WRITEs only"),
    (["write", "--lat", "--qps", "2"], "bandwidth (--bw)"),
    (["write", "--mode", "spray"], "need --qps"),
    (["write", "--qps", "2", "--fragment", "0"], "at least 1"),
])
def test_perf_striping_bad_usage(args, msg):
    """Combinations --qps cannot do: exit 2 and one line naming them."""
    res = subprocess.run(rdma("perf", *args, "127.0.0.1"),
                         capture_output=True, text=True, timeout=T,
                         env=dict(os.environ, **ENV))
    assert res.returncode == 2 and msg in res.stderr, res
    assert "Traceback" not in res.stderr


def test_json_option_of_pingpong_and_perf(tmp_path):
    """``--json`` (the same as ``--output json``) on pingpong and perf:
    one JSON object with the fields of the text output."""
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700)
    env = dict(os.environ, RDMA_UCX_DIR=str(d), **ENV)
    port = free_port()
    args = ["pingpong", "rc", "-n", "50", "-p", str(port), "--timeout", "30",
            "--json"]
    srv, cli = fh.pair(rdma(*args), rdma(*args, "127.0.0.1"), port, env,
                       timeout=T)
    for (rc, out, err), role in ((srv, "server"), (cli, "client")):
        assert rc == 0, out + err
        res = json.loads(out)
        assert res["role"] == role and res["iters"] == 50
        for k in ("bytes", "seconds", "mbit_per_sec", "usec_per_iter"):
            assert isinstance(res[k], (int, float)), k
    port = free_port()
    common = ["perf", "send", "-p", str(port), "--timeout", "30", "--json"]
    srv, cli = fh.pair(rdma(*common), rdma(*common, "--lat", "-n", "100",
                                           "127.0.0.1"), port, env,
                       timeout=T)
    assert srv[0] == 0 and cli[0] == 0, srv[2] + cli[2]
    for out in (srv[1], cli[1]):
        res = json.loads(out)
        assert res["test"] == "send" and res["mode"] == "lat"
        row, = res["results"]
        assert row["iterations"] == 100 and row["t_typical_us"] > 0


@pytest.mark.parametrize("server,client", [("rc", "ud"), ("ud", "rc"),
                                           ("rc", "uc")])
def test_pingpong_modes_that_differ_fail_at_the_exchange(server, client):
    """A ``pingpong rc`` server and a ``ud`` client (or any two modes that
    differ) fail at once, each naming both modes; both used to wait out
    the whole --timeout (here 60 s) for messages that never arrive."""
    import time
    port = free_port()
    t0 = time.monotonic()
    srv, cli = pair(rdma("pingpong", server, "-n", "5", "-p", str(port),
                         "--timeout", "60"),
                    rdma("pingpong", client, "-n", "5", "-p", str(port),
                         "--timeout", "60", "127.0.0.1"), port)
    took = time.monotonic() - t0
    for (rc, out, err), me, peer, mine, theirs in (
            (srv, "server", "client", server, client),
            (cli, "client", "server", client, server)):
        assert rc == 1, (me, rc, out, err)
        line = err.strip()
        assert line == (f"ibtool pingpong: the {peer} runs 'pingpong "
                        f"{theirs}' and this {me} 'pingpong {mine}': they "
                        f"cannot talk (no message would ever arrive); start "
                        f"both sides with the same mode"), (me, err)
    assert took < 30, took
