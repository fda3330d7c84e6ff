"""``ibtool perf`` on Soft-RoCE: every test in bandwidth and latency mode,
with the machine-readable outputs parsed, and its errors."""
import csv
import io
import json
import os
import signal
import subprocess
import time

import pytest

from test_cli_pingpong import (DEV, GIDX, T, Proc, free_port, listening,
                               pair, rdma_cmd, run, server)

TESTS = ("write", "read", "send", "atomic")
BW = ["test", "mode", "bytes", "iterations", "bw_peak_mb_s", "bw_avg_mb_s",
      "msg_rate_mpps"]
LAT = ["test", "mode", "bytes", "iterations", "t_min_us", "t_max_us",
       "t_typical_us", "t_avg_us", "t_stdev_us", "t_p99_us", "t_p999_us"]


def perf(test, port, *extra):
    return rdma_cmd("perf", test, "-d", DEV, "-x", GIDX, "-p", str(port),
                    "--timeout", "60", *extra)


def ok(res, what):
    rc, out, err = res
    assert rc == 0, f"{what} failed ({rc}):\n{out}\n{err}"
    assert "Traceback" not in err
    return out


@pytest.mark.parametrize("mode", ["bw", "lat"])
@pytest.mark.parametrize("test", TESTS)
def test_perf(test, mode):
    """Client in CSV, server in JSON; both validate the data (-c)."""
    port = free_port()
    iters = "60" if mode == "bw" else "30"
    size = [] if test == "atomic" else ["-s", "4096" if mode == "bw" else "2"]
    srv, cli = pair(perf(test, port, "--output", "json"),
                    perf(test, port, f"--{mode}", "-n", iters, "-c", *size,
                         "-t", "16", "-Q", "4", "--output", "csv",
                         "127.0.0.1"), port)
    rows = list(csv.DictReader(io.StringIO(ok(cli, "client"))))
    fields = BW if mode == "bw" else LAT
    assert len(rows) == 1 and list(rows[0]) == fields
    row = rows[0]
    assert row["test"] == test and row["mode"] == mode
    assert int(row["bytes"]) == (8 if test == "atomic" else
                                 4096 if mode == "bw" else 2)
    assert int(row["iterations"]) == int(iters)
    for k in fields[4:]:
        assert float(row[k]) > 0, (k, row)
    if mode == "bw":
        assert float(row["bw_peak_mb_s"]) >= float(row["bw_avg_mb_s"]) * 0.999
    else:
        assert (float(row["t_min_us"]) <= float(row["t_typical_us"]) <=
                float(row["t_max_us"]))
    rec = json.loads(ok(srv, "server"))
    assert rec["role"] == "server" and rec["test"] == test
    assert rec["mode"] == mode and len(rec["results"]) == 1
    assert rec["results"][0]["bytes"] == int(row["bytes"])


@pytest.mark.parametrize("lb", ["dqplb", "spray"])
def test_perf_striped_over_a_virtual_qp(lb):
    """``perf write --qps 4 --mode LB`` on rxe: the VirtualQP's bandwidth
    next to the single QP's, the data checked on both sides (-c)."""
    port = free_port()
    srv, cli = pair(perf("write", port, "--json"),
                    perf("write", port, "--qps", "4", "--mode", lb,
                         "--fragment", "16384", "-s", "65536", "-n", "30",
                         "-t", "8", "-c", "--json", "127.0.0.1"), port)
    res = json.loads(ok(cli, "client"))
    assert (res["qps"], res["lb_mode"], res["fragment"]) == (4, lb, 16384)
    row, = res["results"]
    assert row["bytes"] == 65536 and row["iterations"] == 30
    for k in ("bw_avg_mb_s", "single_bw_avg_mb_s", "speedup"):
        assert row[k] > 0, (k, row)
    assert json.loads(ok(srv, "server"))["results"] == [row]


def test_perf_all_sizes_text_and_progress():
    """-a up to --max-size; the text table on stdout, the progress bar
    (forced) on stderr."""
    port = free_port()
    srv, cli = pair(perf("write", port),
                    perf("write", port, "-a", "--max-size", "1024", "-n",
                         "20", "--progress", "always", "127.0.0.1"), port)
    out = ok(cli, "client")
    assert "RDMA_Write BW Test" in out and "BW average[MB/sec]" in out
    sizes = [int(line.split()[0]) for line in out.splitlines()
             if line.strip() and line.split()[0].isdigit()]
    assert sizes == [2 ** k for k in range(1, 11)]
    assert cli[2].strip(), "no progress bar on stderr"
    assert ok(srv, "server").count("\n 1024 ") == 1


def test_perf_json_lat_server_prints_same_rows():
    port = free_port()
    srv, cli = pair(perf("send", port, "--output", "json"),
                    perf("send", port, "--lat", "-n", "20", "-s", "64",
                         "--output", "json", "127.0.0.1"), port)
    c, s = json.loads(ok(cli, "client")), json.loads(ok(srv, "server"))
    assert c["results"] == s["results"]
    assert c["results"][0]["iterations"] == 20


def test_perf_no_server():
    rc, _, err = run(perf("write", free_port(), "127.0.0.1"))
    assert rc == 1 and err.startswith("ibtool perf: couldn't connect")
    assert len(err.strip().splitlines()) == 1


def test_perf_server_timeout():
    rc, _, err = run(perf("read", free_port(), "--timeout", "2"))
    assert rc == 124 and "timed out" in err
    assert len(err.strip().splitlines()) == 1


def test_perf_rejects_a_foreign_client():
    """A client that speaks another protocol: one-line error, exit 1."""
    import socket
    port = free_port()
    with server(perf("write", port, "--timeout", "5"), port) as srv:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b'{"cmd":"hello","proto":"nope","version":9}\n')
            s.recv(4096)
        rc, _, err = srv.finish()
    assert rc == 1 and err.startswith("ibtool perf: ")


def test_perf_client_killed_mid_run(tmp_path):
    """The client dies during a long run: the server notices (the
    connection closes, or its --timeout fires) instead of hanging."""
    port = free_port()
    out = tmp_path / "server.out"
    with open(out, "w") as f:
        srv = subprocess.Popen(perf("write", port, "--timeout", "10"),
                               stdout=f, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    cli = None
    try:
        deadline = time.monotonic() + T
        while not listening(port):
            assert srv.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        cli = Proc(perf("write", port, "-n", "100000000", "-s", "2",
                        "127.0.0.1"))
        while "#bytes" not in out.read_text():
            assert srv.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1)
        cli.kill()
        t0 = time.monotonic()
        _, err = srv.communicate(timeout=T)
        assert srv.returncode in (1, 124), err
        assert err.startswith("ibtool perf: ") and "Traceback" not in err
        assert time.monotonic() - t0 < 60
    finally:
        if srv.poll() is None:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
        if cli is not None:
            cli.kill()


@pytest.mark.parametrize("argv", [
    ["perf"],
    ["perf", "write", "--bw", "--lat"],
    ["perf", "nope"],
    ["perf", "write", "-s", "0"],
    ["perf", "write", "--output", "xml"],
    ["perf", "atomic", "-s", "16", "-d", DEV, "127.0.0.1"],
    ["perf", "write", "-a", "-s", "64", "-d", DEV, "127.0.0.1"],
])
def test_perf_bad_usage_exits_2(argv):
    rc, _, err = run(rdma_cmd(*argv))
    assert rc == 2, err
    assert "Traceback" not in err


def test_perf_help():
    rc, out, _ = run(rdma_cmd("perf", "--help"))
    assert rc == 0 and "--bw" in out and "--output" in out
    assert os.linesep in out
