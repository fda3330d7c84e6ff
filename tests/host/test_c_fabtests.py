"""libfabric's verbs provider (Debian's ``libfabric1``) with its own
tools (``libfabric-bin``: ``fi_info``, ``fi_pingpong``), unmodified, on
ucx0 through the verbs front end: every endpoint type and transfer mode
``fi_pingpong`` has that sits on an RC or UD device, C to C, over UCX
shared memory and over TCP.

libfabric is a verbs client of its own kind: it finds devices by
``ibv_get_device_list``, matches them to IP addresses through librdmacm
(``rdma_getaddrinfo`` with the addresses in the hints and no node, then
``rdma_create_ep``/``rdma_bind_addr``), connects its MSG endpoints with
rdma_cm, and builds reliable datagrams (RDM) either over MSG endpoints
(``ofi_rxm``: connections made on demand, tagged and untagged messages,
eager, rendezvous by RDMA READ) or over UD QPs (``ofi_rxd``: its own
acknowledgements and retransmission).  ``fi_pingpong`` exchanges every
size from 64 bytes to 1 MiB (4 KiB for DGRAM: one MTU), and ``-c`` checks
each message's bytes; it then tears everything down in its own order.
"""
import re
import shutil
import subprocess

import pytest

import fabric_helpers as fh

T = 90          # seconds for any one process
SHM = {"UCX_TLS": "shm,self"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}

#: (provider, endpoint type, transfer mode): fi_pingpong's whole matrix
#: on a verbs device; "verbs;ofi_rxd" is RDM over UD QPs, "verbs" with
#: rdm is RDM over RC (ofi_rxm)
MATRIX = [
    ("verbs", "msg", "msg"),
    ("verbs", "rdm", "msg"),
    ("verbs", "rdm", "tagged"),
    ("verbs", "dgram", "msg"),
    ("verbs;ofi_rxd", "rdm", "msg"),
    ("verbs;ofi_rxd", "rdm", "tagged"),
]

_REASON = fh.c_front_missing(())
if _REASON is None and (shutil.which("fi_pingpong") is None
                        or shutil.which("fi_info") is None):
    _REASON = "libfabric's tools are not installed (Debian package " \
              "libfabric-bin)"
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture(params=["shm", "tcp"])
def env(request, tmp_path):
    """A private rendezvous directory for the test's processes, and the
    UCX transport."""
    e = fh.rendezvous_env(tmp_path)
    e.update(SHM if request.param == "shm" else TCP)
    # libfabric's own choice of provider must not reach past verbs
    e.pop("FI_PROVIDER", None)
    return e


on_fabric = fh.on_fabric


def test_fi_info(env):
    """The verbs provider finds ucx0: a MSG domain (RC), a DGRAM domain
    ``ucx0-dgram`` (UD), and RDM over each through ofi_rxm/ofi_rxd."""
    p = subprocess.run(on_fabric("fi_info", "-p", "verbs"), env=env,
                       capture_output=True, text=True, timeout=T)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    found = set(re.findall(
        r"provider: (\S+)\n\s+fabric: \S+\n\s+domain: (\S+)\n"
        r"\s+version: \S+\n\s+type: (\S+)", p.stdout))
    assert {("verbs", "ucx0", "FI_EP_MSG"),
            ("verbs", "ucx0-dgram", "FI_EP_DGRAM"),
            ("verbs;ofi_rxm", "ucx0", "FI_EP_RDM"),
            ("verbs;ofi_rxd", "ucx0-dgram", "FI_EP_RDM")} <= found, p.stdout


def _run(args, env):
    """fi_pingpong server and client with *args*; their (rc, out, err)."""
    port = fh.free_port()
    srv = fh.popen(on_fabric("fi_pingpong", *args, "-B", str(port)), env)
    cli = None
    try:
        fh.wait_listening(srv, port, T)
        cli = fh.popen(on_fabric("fi_pingpong", *args, "-P", str(port),
                                 "127.0.0.1"), env)
        c_out, c_err = cli.communicate(timeout=T)
        try:
            s_out, s_err = srv.communicate(timeout=T if cli.returncode == 0
                                           else 5)
        except subprocess.TimeoutExpired:
            fh.kill(srv)
            s_out, s_err = srv.communicate()
            return (None, s_out, s_err), (cli.returncode, c_out, c_err)
        return (srv.returncode, s_out, s_err), (cli.returncode, c_out, c_err)
    finally:
        fh.kill(srv)
        if cli is not None:
            fh.kill(cli)


@pytest.mark.parametrize("prov,ep,mode", MATRIX,
                         ids=["-".join(m).replace("verbs;ofi_", "")
                              for m in MATRIX])
def test_fi_pingpong(env, prov, ep, mode):
    # -I 20: twenty round trips of every size; -c: check the bytes
    args = ["-p", prov, "-e", ep, "-m", mode, "-I", "20", "-c"]
    (s_rc, s_out, s_err), (c_rc, c_out, c_err) = _run(args, env)
    both = f"client:\n{c_out}{c_err}\nserver:\n{s_out}{s_err}"
    assert c_rc == 0 and s_rc == 0, both
    assert c_err == "" and s_err == "", both
    largest = "4k" if ep == "dgram" else "1m"
    for out in (c_out, s_out):
        sizes = re.findall(r"^(\S+)\s+20\s+=20\s", out, re.M)
        assert sizes and sizes[0] == "64" and sizes[-1] == largest, both
