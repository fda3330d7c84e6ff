"""What a MAD command imports before it sends its first MAD.

``ibtool ibnetdiscover`` / ``saquery`` and ``python -m rdma.discovery``
are measured against the C tools process start to exit
(tests/bench/bench_discovery.py), so the modules they load are part of
their time.  These standard modules cost 1 to 4 ms each and the commands
do not need them: inspect (4 ms, for one isgenerator), shutil (2 ms,
which argparse imports for the terminal's width at every add_argument),
random (one 32-bit TID seed), ipaddress (only to parse or print a GID
as text) and copy (only to follow a redirect)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AVOIDED = ("inspect", "shutil", "random", "ipaddress", "copy")

CODE = """
import sys
import rdma, rdma.discovery, rdma.sched, rdma.umad, rdma.sa
import rdma.satransactor, rdma.cli, rdma.cli.ibnetdiscover, rdma.cli.saquery
from rdma.cli import build_parser
for name in ("ibnetdiscover", "saquery"):
    args = build_parser(name).parse_args([name])
try:
    rdma.discovery.main(["--help"])
except SystemExit:
    pass
print(rdma.__file__)
print(" ".join(m for m in {avoided!r} if m in sys.modules))
"""


def test_mad_commands_do_not_import_what_they_do_not_use(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", CODE.format(avoided=AVOIDED)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
             "COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    where, loaded = res.stdout.splitlines()[-2:]
    assert where == str(ROOT / "rdma" / "__init__.py")
    assert loaded == ""


def test_help_keeps_the_terminal_width(tmp_path):
    """Without shutil the help text still wraps at $COLUMNS."""
    out = {}
    for cols in ("50", "120"):
        res = subprocess.run(
            [sys.executable, "-m", "rdma", "ibnetdiscover", "--help"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                 "COLUMNS": cols})
        assert res.returncode == 0, res.stderr
        out[cols] = max(len(x) for x in res.stdout.splitlines())
    assert out["50"] < 60 < out["120"] <= 120
