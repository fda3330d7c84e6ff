"""Subnet discovery: ``rdma.discovery`` against ``ibnetdiscover``.

For each fat-tree size (``tests/sa/topologies/gen_fattree.py``; the
largest, radix 62, is 1922 HCAs and 93 switches, the most ibsim takes)
this starts ibsim + opensm, waits for the client port to be ACTIVE, then
alternates, ``--repeat`` times, ``ibnetdiscover`` and ``python -m
rdma.discovery`` (NodeInfo, NodeDescription, PortInfo: what
ibnetdiscover reads; ``ibtool ibnetdiscover``'s path: the default
``rdma.sched`` scheduler) on the same node of the same fabric, and
prints the medians side by side:

- ``ibnetdiscover``: the wall time of the process;
- ``ours``: the time of the discovery inside our process (``load()``);
- ``ours+start``: the wall time of our process, Python start and imports
  included (ibnetdiscover's start is in its figure), and the JSON summary
  it prints (ibnetdiscover prints its topology).  The packages are
  byte-compiled first, as an installed package is.

The same three as CPU time (user + system: of the processes, and of
``load()`` inside ours) depend less on the machine's load.  Ratios are
ours / ibnetdiscover (below 1: we are faster); ``us/SMP`` is our
``load()`` time per SMP sent, which shows how discovery grows with the
fabric (a constant: linear in the number of ports).  A last table sums
it up per size.  Not a test: pytest does not collect it.  Run::

    .venv/bin/python tests/bench/bench_discovery.py [--radix 8,16,36,62]
        [--repeat 5] [--outstanding 16] [--baseline DIR]
        [--sa-radix 8,16] [--shim SHIM.so]

Then SA GetTable of every PathRecord against ``saquery -p`` (all pairs
of end ports: 1936 records at radix 8, 23104 at 16; ``--sa-radix ''``
skips it), with ``--baseline`` the other copy's too, wall and CPU time
of the processes.  It needs RMPP: rdma's ibsim shim that ``setup.py`` builds
(the default, see ``tests/sa/fabric.py``; Debian's cuts RMPP answers to
one MAD).
"""
import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sa"))
sys.path.insert(0, str(ROOT / "tests" / "sa" / "topologies"))

import fabric  # noqa: E402
from fabric import Fabric  # noqa: E402
from gen_fattree import Tree  # noqa: E402

CLIENT = "Hca2"
#: Another copy of the rdma package (``--baseline``), timed as ``base``.
BASELINE = None


def _children_cpu():
    """User + system CPU seconds of the waited-for children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_active(f, node=CLIENT, timeout=30.0):
    deadline = time.monotonic() + timeout
    while "State: Active" not in f.run(["ibstat"], node).stdout:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node} did not become ACTIVE")
        time.sleep(0.1)


def _run_with(f, argv, pythonpath):
    """``f.run(argv, CLIENT)``, with *pythonpath* (if given) first on
    ``PYTHONPATH``: another copy of ``rdma``."""
    if pythonpath is None:
        return f.run(argv, CLIENT, timeout=300)
    env = f.env(CLIENT)
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath),
                                         env["PYTHONPATH"]])
    res = subprocess.run(["timeout", "-k", "2", "300"] + argv,
                         cwd=f.scratch, env=env, capture_output=True,
                         text=True, timeout=305)
    if res.returncode:
        raise RuntimeError(f"{argv} with {pythonpath} failed: "
                           f"{res.stderr[-1500:]}")
    return res


def _compare(f, tree, radix, repeat, outstanding, up, sched):
    """ibnetdiscover and ``python -m rdma.discovery`` alternately,
    *repeat* times each; the medians.  *sched* ``base`` runs the copy of
    ``rdma`` that ``--baseline`` names, ``sched`` this one."""
    theirs, mine, mine_wall, smps = [], [], [], None
    theirs_cpu, mine_cpu, mine_cpu_all = [], [], []
    pythonpath = None
    if sched == "base":
        pythonpath = BASELINE
        argv = [sys.executable, "-m", "rdma.discovery"]
    else:
        argv = [sys.executable, "-m", "rdma.discovery"]
    if outstanding:
        argv += ["--outstanding", str(outstanding)]
    for _ in range(repeat):
        t0, c0 = time.monotonic(), _children_cpu()
        out = f.run(["ibnetdiscover"], CLIENT, timeout=300).stdout
        theirs.append(time.monotonic() - t0)
        theirs_cpu.append(_children_cpu() - c0)
        assert out.count("\nCa\t") + out.count("\nSwitch\t") == \
            tree.num_hcas + tree.num_switches, "ibnetdiscover missed nodes"
        t0, c0 = time.monotonic(), _children_cpu()
        res = json.loads(_run_with(f, argv, pythonpath).stdout)
        mine_wall.append(time.monotonic() - t0)
        mine_cpu_all.append(_children_cpu() - c0)
        mine.append(res["times"][-1])
        mine_cpu.append(res["cpu_times"][-1])
        smps = res["smps"]
        if res["errors"] or len(res["nodes"]) != \
                tree.num_hcas + tree.num_switches:
            raise RuntimeError(f"discovery incomplete: "
                               f"{len(res['nodes'])} nodes, errors "
                               f"{res['errors'][:3]}")
    return {"radix": radix, "sched": sched, "hcas": tree.num_hcas,
            "switches": tree.num_switches, "sm_up_s": up, "smps": smps,
            "ibnetdiscover": statistics.median(theirs),
            "ours": statistics.median(mine),
            "ours_start": statistics.median(mine_wall),
            "ours_best": min(mine), "ibnetdiscover_best": min(theirs),
            "cpu_ibnetdiscover": statistics.median(theirs_cpu),
            "cpu_ours": statistics.median(mine_cpu),
            "cpu_ours_start": statistics.median(mine_cpu_all),
            "all": {"ibnetdiscover": theirs, "ours": mine,
                    "ours_start": mine_wall, "cpu_ibnetdiscover":
                    theirs_cpu, "cpu_ours": mine_cpu,
                    "cpu_ours_start": mine_cpu_all}}


def one_size(radix, repeat, outstanding, scratch, scheds=("sched",)):
    """Start the fat-tree of *radix* and time ibnetdiscover against our
    discovery with each scheduler of *scheds*; one result per scheduler."""
    tree = Tree(radix)
    topo = scratch / f"fattree{radix}"
    topo.write_text(tree.text())
    f = Fabric(topo, scratch / f"run{radix}")
    try:
        f.start()
        up = f.startup_s
        wait_active(f)
        results = []
        for sched in scheds:
            results.append(_compare(f, tree, radix, repeat, outstanding, up,
                                    sched))
        return results
    finally:
        f.close()


#: Our side of the SA benchmark: one GetTable of every PathRecord.
SA_SCRIPT = """
import json, time, rdma
from rdma import IBA
umad = rdma.get_umad(None)
t0, c0 = time.monotonic(), time.process_time()
recs = umad.SubnAdmGetTable(IBA.SAPathRecord())
print(json.dumps({"n": len(recs), "t": time.monotonic() - t0,
                  "cpu": time.process_time() - c0}))
"""


def sa_size(radix, repeat, scratch):
    """GetTable of all PathRecords: ``saquery -p`` against
    ``UMAD.SubnAdmGetTable(SAPathRecord())`` (RMPP: needs a shim that
    passes it), and against the ``--baseline`` copy's when given (in
    turn, in the same minutes).  One result per copy of ``rdma``."""
    tree = Tree(radix)
    topo = scratch / f"fattree{radix}"
    topo.write_text(tree.text())
    f = Fabric(topo, scratch / f"sa{radix}")
    copies = ([("base", BASELINE)] if BASELINE is not None else []) + \
        [("sched", None)]
    try:
        f.start()
        wait_active(f)
        theirs, theirs_cpu, n = [], [], None
        mine = {name: ([], [], []) for name, _ in copies}
        for _ in range(repeat):
            t0, c0 = time.monotonic(), _children_cpu()
            out = f.run(["saquery", "-p"], CLIENT, timeout=600).stdout
            theirs.append(time.monotonic() - t0)
            theirs_cpu.append(_children_cpu() - c0)
            got = out.count("PathRecord dump")
            for name, pythonpath in copies:
                t0, c0 = time.monotonic(), _children_cpu()
                res = json.loads(_run_with(f, [sys.executable, "-c",
                                               SA_SCRIPT],
                                           pythonpath).stdout)
                inside, wall, cpu = mine[name]
                wall.append(time.monotonic() - t0)
                cpu.append(_children_cpu() - c0)
                inside.append(res["t"])
                if res["n"] != got:
                    raise RuntimeError(f"saquery printed {got} PathRecords, "
                                       f"{name} got {res['n']}")
            n = got
        return [{"radix": radix, "sched": name, "records": n,
                 "saquery": statistics.median(theirs),
                 "cpu_saquery": statistics.median(theirs_cpu),
                 "ours": statistics.median(mine[name][0]),
                 "ours_start": statistics.median(mine[name][1]),
                 "cpu_ours_start": statistics.median(mine[name][2])}
                for name, _ in copies]
    finally:
        f.close()


def _print_row(res):
    t = res["ibnetdiscover"]
    per = f"{res['ours'] / res['smps'] * 1e6:>6.1f}" if res["smps"] \
        else f"{'-':>6}"
    print(f"{res['radix']:>5} {res['sched']:>7} {res['hcas']:>5} "
          f"{res['switches']:>4} {res['smps'] or '-':>6} "
          f"{res['sm_up_s']:>5.2f}s {t:>8.3f}s {res['ours']:>6.3f}s "
          f"{res['ours_start']:>9.3f}s {res['ours'] / t:>6.2f} "
          f"{res['ours_start'] / t:>11.2f} {per} | "
          f"{res['cpu_ibnetdiscover']:>7.3f}s {res['cpu_ours']:>7.3f}s "
          f"{res['cpu_ours_start']:>6.2f}s "
          f"{res['cpu_ours'] / res['cpu_ibnetdiscover']:>6.2f}", flush=True)


def _print_growth(rows):
    """How each tool's time grows with the fabric: per size, the nodes,
    the SMPs, the medians and the best of the repeats, and the time per
    node relative to the smallest size (1.0: linear growth)."""
    if not rows:
        return
    print("\nGrowth with the fabric's size (wall seconds, median / best of "
          "the repeats; per node: ms per 100 nodes)")
    print(f"{'radix':>5} {'sched':>7} {'nodes':>5} {'SMPs':>6} "
          f"{'ibnetdisc':>15} {'ours':>15} {'ratio':>6} "
          f"{'ibnd/100n':>9} {'ours/100n':>9}")
    for r in rows:
        nodes = r["hcas"] + r["switches"]
        print(f"{r['radix']:>5} {r['sched']:>7} {nodes:>5} "
              f"{r['smps'] or '-':>6} "
              f"{r['ibnetdiscover']:>7.3f}/{r['ibnetdiscover_best']:<6.3f}s "
              f"{r['ours']:>7.3f}/{r['ours_best']:<6.3f}s "
              f"{r['ours'] / r['ibnetdiscover']:>6.2f} "
              f"{r['ibnetdiscover'] / nodes * 1e5:>8.1f}m "
              f"{r['ours'] / nodes * 1e5:>8.1f}m", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--radix", default="8,16,24,36,48,62",
                    help="fat-tree radixes, comma separated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--outstanding", type=int, default=0,
                    help="SMPs in flight (default: the scheduler's)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a directory holding another copy of the rdma "
                         "package (an older commit, its extension built): "
                         "also time its default discovery and its "
                         "GetTable, as 'base'")
    ap.add_argument("--json", action="store_true",
                    help="also print one RESULT {json} line per size")
    ap.add_argument("--sa-radix", default="8,16",
                    help="time GetTable of all PathRecords against "
                         "saquery -p on these fat-trees ('' for none)")
    ap.add_argument("--shim", type=Path, default=None,
                    help="the ibsim shim to use (default: rdma's own, "
                         "rdma/fabric/librdma_umad2sim.so; Debian's cuts "
                         "RMPP, which the SA benchmark needs)")
    a = ap.parse_args()
    if a.shim is not None:
        fabric.SHIM = a.shim
    scheds = ["sched"]
    # Byte-compile the packages first: with PYTHONDONTWRITEBYTECODE set
    # (as in CI) every start would compile rdma's sources again (~0.1 s),
    # which an installed package does not.
    for pkg in [ROOT / "rdma"] + ([a.baseline / "rdma"] if a.baseline
                                   else []):
        compileall.compile_dir(str(pkg), quiet=1)
    if a.baseline is not None:
        global BASELINE
        BASELINE = a.baseline.resolve()
        scheds.insert(0, "base")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
          f"CPUs; shim {fabric.SHIM}; wall seconds, then CPU seconds "
          f"(user+system)")
    print(f"{'radix':>5} {'sched':>7} {'HCAs':>5} {'sw':>4} {'SMPs':>6} "
          f"{'SM up':>6} "
          f"{'ibnetdisc':>9} {'ours':>7} {'ours+start':>10} "
          f"{'ratio':>6} {'ratio+start':>11} {'us/SMP':>6} | {'cpu ibnd':>8} "
          f"{'cpu ours':>8} {'+start':>7} {'ratio':>6}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-disc-") as tmp:
        for r in (int(x) for x in a.radix.split(",") if x):
            for res in one_size(r, a.repeat, a.outstanding, Path(tmp),
                                scheds):
                _print_row(res)
                rows.append(res)
                if a.json:
                    print("RESULT " + json.dumps(res), flush=True)
        _print_growth(rows)
        if a.sa_radix:
            print(f"\nGetTable of all PathRecords (wall seconds, then CPU "
                  f"seconds of the processes)\n"
                  f"{'radix':>5} {'sched':>7} {'records':>8} {'saquery':>8} "
                  f"{'ours':>7} {'ours+start':>10} {'ratio':>6} "
                  f"{'ratio+start':>11} | {'cpu saq':>8} {'cpu ours':>8} "
                  f"{'ratio':>6}")
        for r in (int(x) for x in a.sa_radix.split(",") if x):
            for res in sa_size(r, a.repeat, Path(tmp)):
                t = res["saquery"]
                print(f"{r:>5} {res['sched']:>7} {res['records']:>8} "
                      f"{t:>7.3f}s {res['ours']:>6.3f}s "
                      f"{res['ours_start']:>9.3f}s "
                      f"{res['ours'] / t:>6.2f} "
                      f"{res['ours_start'] / t:>11.2f} | "
                      f"{res['cpu_saquery']:>7.3f}s "
                      f"{res['cpu_ours_start']:>7.3f}s "
                      f"{res['cpu_ours_start'] / res['cpu_saquery']:>6.2f}",
                      flush=True)
                if a.json:
                    print("RESULT " + json.dumps(res), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
