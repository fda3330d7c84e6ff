"""rdma-core's own provider test suite as a tier of ours.

rdma-core tests every provider with a pyverbs unittest suite; Debian ships
it with python3-pyverbs in /usr/share/doc/rdma-core/tests, gzipped.  It is
rdma-core's code (GPL-2.0 or Linux-OpenIB), not ours: it is never copied
into this repository.  Each run decompresses the installed copy into a
scratch directory and runs it there, unmodified, with Debian's
/usr/bin/python3 (tests/rdmacore/driver.py does what its run_tests.py does
and records each test's outcome)::

    run_suite.py run --dev ucx0 --fabric --out DIR --label ucx0-shm
    run_suite.py run --dev rxe0 --out DIR --label rxe0        # in the VM
    run_suite.py compare --junit OUT.xml ucx0-shm=A.json ucx0-tcp=B.json \\
        rxe0=C.json

``run`` writes DIR/LABEL.json (outcomes) and DIR/LABEL.log (the suite's
own output); ``--fabric`` runs it through the verbs front end
(``python -m rdma.fabric exec``), with UCX_TLS as the caller set it.

``compare`` prints the counts side by side and writes a JUnit report with
one test case per rdma-core test.  A test fails there if it fails or
errors on a ucx0 run, or if it passes on rxe0 (the control: a NIC's
driver, Soft-RoCE, in the test VM) and not on every ucx0 run -- unless it
is in EXCEPTIONS, the tests that need what ucx0, an InfiniBand-link
software device, cannot be -- or if it is in REQUIRED_ON_UCX0 (what ucx0
does beyond rxe0, the ODP tests) and does not pass on every ucx0 run.
A missing report fails the tier.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

SUITE = "/usr/share/doc/rdma-core/tests"
PYTHON = "/usr/bin/python3"
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "driver.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# Tests that pass on rxe0 and may not on ucx0, each with why.  Only two
# kinds belong here: those that need an Ethernet link layer (RoCE
# addressing, raw packet QPs) and those that need vendor hardware (mlx5,
# efa).  ucx0's port is an InfiniBand port (LIDs, a subnet manager's
# view): a RoCE test skips on it as it does on every IB HCA.
EXCEPTIONS = {
    "tests.test_addr.AHTest.test_create_ah_roce":
        "RoCE addressing: needs an Ethernet link layer (ucx0's port is "
        "InfiniBand; the test skips on any IB port)",
}

# Tests that pass on rxe0 and not yet on ucx0 because what they need is
# still to be built (issue #22): reported in the tier as skipped with
# that reason, and failing the tier once they pass on ucx0 (take them out
# of here then).  Matched by prefix of the test id.
PENDING: dict[str, str] = {}


# Tests ucx0 must pass on every run though rxe0 may not (they skip there):
# what the fabric does beyond rxe (issue #22), by test id; one skipped or
# failed on a ucx0 run fails the tier.  Implicit
# ODP (an MR over the whole address space) and huge pages (none
# allocated on the CI machines) are not among them.
REQUIRED_ON_UCX0 = {
    "tests.test_odp.OdpTestCase.test_odp_" + name:
        "on-demand paging: the fabric never pins memory (docs/fabric.rst)"
    for name in ("rc_traffic", "ud_traffic", "rc_srq_traffic",
                 "rc_rdma_read", "rc_rdma_write", "rc_atomic_cmp_and_swp",
                 "rc_atomic_fetch_and_add", "sync_prefetch_rc_traffic",
                 "async_prefetch_rc_traffic",
                 "prefetch_sync_no_page_fault_rc_traffic",
                 "prefetch_async_no_page_fault_rc_traffic")
}
REQUIRED_ON_UCX0["tests.test_shared_pd.SharedPDTestCase."
                 "test_imported_rc_ex_rdma_write"] = \
    "a context imported in its process (docs/c_programs.rst)"


def required(tid):
    """Why ucx0 must pass test tid whatever rxe0 does, or None."""
    return REQUIRED_ON_UCX0.get(tid)


def pending(tid):
    """Why test tid is still pending on ucx0, or None."""
    for prefix, why in PENDING.items():
        if tid.startswith(prefix):
            return why
    return None


STATUSES = ("ok", "fail", "error", "skip", "xfail", "xpass")


def unpack(dest):
    """The installed suite, decompressed into dest (a scratch directory)."""
    if not os.path.isdir(SUITE):
        raise SystemExit(f"{SUITE} is missing (Debian package "
                         "python3-pyverbs)")
    for name in os.listdir(SUITE):
        src = os.path.join(SUITE, name)
        if os.path.isdir(src):
            continue
        if name.endswith(".gz"):
            with gzip.open(src, "rb") as f, \
                    open(os.path.join(dest, name[:-3]), "wb") as g:
                shutil.copyfileobj(f, g)
        else:
            shutil.copy(src, os.path.join(dest, name))


def run(args):
    """Run the suite once on args.dev; the driver's exit status."""
    os.makedirs(args.out, exist_ok=True)
    out_json = os.path.join(os.path.abspath(args.out), args.label + ".json")
    log = os.path.join(os.path.abspath(args.out), args.label + ".log")
    with tempfile.TemporaryDirectory(prefix="rdmacore-") as scratch:
        suite = os.path.join(scratch, "tests")
        os.mkdir(suite)
        unpack(suite)
        cmd = [PYTHON, DRIVER, suite, out_json, "--dev", args.dev, "-v"]
        env = dict(os.environ)
        if args.fabric:
            cmd = [sys.executable, "-P", "-m", "rdma.fabric", "exec", "--"] \
                + cmd
            # a rendezvous directory of its own: no other node in sight
            rdv = os.path.join(scratch, "rendezvous")
            os.mkdir(rdv, 0o700)
            env["RDMA_UCX_DIR"] = rdv
            env["PYTHONPATH"] = os.pathsep.join(
                [ROOT] + [p for p in env.get("PYTHONPATH", "").split(
                    os.pathsep) if p])
        start = time.monotonic()
        with open(log, "w") as f:
            try:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                    env=env, cwd=scratch,
                                    timeout=args.timeout).returncode
            except subprocess.TimeoutExpired:
                f.write(f"\n[run_suite] killed after {args.timeout} s\n")
                rc = 124
        took = time.monotonic() - start
    try:
        with open(out_json) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"tests": {}}
        rc = rc or 1
    res["wall_seconds"] = took
    res["dev"] = args.dev
    res["exit"] = rc
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    c = counts(res)
    print(f"[rdmacore] {args.label} ({args.dev}): {c['tests']} tests, "
          f"{c['ok']} ok, {c['fail']} failures, {c['error']} errors, "
          f"{c['skip']} skipped in {took:.1f} s (exit {rc}; {log})")
    return rc


def counts(res):
    c = {s: 0 for s in STATUSES}
    for t in res["tests"].values():
        c[t["status"]] += 1
    c["tests"] = len(res["tests"])
    return c


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"missing": str(e), "tests": {}}


def verdict(tid, ucx, rxe):
    """("fail", why), ("skip", why) or ("ok", "") for test tid, from its
    outcomes on the ucx0 runs (label -> outcome or None) and on rxe0."""
    bad = [f"{label}: {o['status']}\n{o['detail']}"
           for label, o in ucx.items()
           if o is not None and o["status"] in ("fail", "error", "xpass")]
    if bad:
        return "fail", "\n".join(bad)
    if all(o is not None and o["status"] in ("ok", "xfail")
           for o in ucx.values()):
        if pending(tid):
            return "fail", (f"passes on ucx0 now: take it out of PENDING "
                            f"({pending(tid)})")
        return "ok", ""
    why = "; ".join(f"{label}: " + (f"{o['status']} {o['detail']}"
                                    if o else "not run")
                    for label, o in ucx.items())
    if required(tid):
        return "fail", f"required on ucx0 ({required(tid)}): {why}"
    if rxe is not None and rxe["status"] == "ok":
        if tid in EXCEPTIONS:
            return "skip", f"passes on rxe0 only: {EXCEPTIONS[tid]} ({why})"
        if pending(tid):
            return "skip", f"PENDING on ucx0: {pending(tid)} ({why})"
        return "fail", f"passes on rxe0, not on ucx0: {why}"
    return "skip", why


def table(runs):
    """The counts of each run, side by side."""
    labels = list(runs)
    rows = [("", labels)]
    for key in ("tests", "ok", "fail", "error", "skip"):
        rows.append((key, [str(counts(runs[lb])[key])
                           if "missing" not in runs[lb] else "-"
                           for lb in labels]))
    rows.append(("seconds", [f"{runs[lb].get('wall_seconds', 0):.0f}"
                             if "missing" not in runs[lb] else "-"
                             for lb in labels]))
    w = max(12, *(len(lb) + 2 for lb in labels))
    return "\n".join(f"{name:10}" + "".join(f"{v:>{w}}" for v in vals)
                     for name, vals in rows)


def compare(args):
    runs = {}
    for spec in args.reports:
        label, _, path = spec.partition("=")
        runs[label] = load(path)
    rxe_label = args.control
    ucx_labels = [lb for lb in runs if lb != rxe_label]
    rxe = runs.get(rxe_label, {"missing": "not given", "tests": {}})
    print("[rdmacore] rdma-core's provider test suite "
          f"({SUITE}), outcomes per run:")
    print(table(runs))
    ids = sorted(set().union(*(r["tests"] for r in runs.values())))
    suite = ET.Element("testsuite", name="rdmacore")
    n = {"tests": 0, "failures": 0, "skipped": 0, "errors": 0}
    failed = []
    for label, r in runs.items():
        n["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname="rdmacore.reports",
                             name=label)
        if "missing" in r:
            ET.SubElement(case, "failure", message=f"no report: "
                          f"{r['missing']}")
            n["failures"] += 1
            failed.append(f"report {label}")
        elif r.get("exit") not in (0, 1) or not r["tests"]:
            ET.SubElement(case, "failure", message=f"the suite did not "
                          f"run to its end (exit {r.get('exit')})")
            n["failures"] += 1
            failed.append(f"report {label}")
    for tid in ids:
        ucx = {lb: runs[lb]["tests"].get(tid) for lb in ucx_labels}
        v, why = verdict(tid, ucx, rxe["tests"].get(tid))
        mod, _, name = tid.rpartition(".")
        n["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname="rdmacore." + mod,
                             name=name)
        if v == "fail":
            ET.SubElement(case, "failure",
                          message=why.splitlines()[0][:200]).text = why
            n["failures"] += 1
            failed.append(f"{tid}: {why.splitlines()[0]}")
        elif v == "skip":
            ET.SubElement(case, "skipped", message=why[:400])
            n["skipped"] += 1
    for k, v in n.items():
        suite.set(k, str(v))
    if args.junit:
        ET.ElementTree(suite).write(args.junit, encoding="unicode",
                                    xml_declaration=True)
    for line in failed:
        print(f"[rdmacore] FAIL {line}")
    rxe_bad = [t for t, o in rxe["tests"].items()
               if o["status"] in ("fail", "error")]
    if rxe_bad:
        print(f"[rdmacore] on the control {rxe_label} (not counted): "
              + ", ".join(f"{t} {rxe['tests'][t]['status']}"
                          for t in sorted(rxe_bad)))
    print(f"[rdmacore] {n['tests'] - n['failures'] - n['skipped']} passed, "
          f"{n['failures']} failed, {n['skipped']} skipped")
    return 1 if failed else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the suite on one device")
    r.add_argument("--dev", required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--fabric", action="store_true",
                   help="through the verbs front end (ucx0)")
    r.add_argument("--timeout", type=float, default=900)
    c = sub.add_parser("compare", help="the tier's verdict")
    c.add_argument("--junit")
    c.add_argument("--control", default="rxe0",
                   help="the label of the control run (default rxe0)")
    c.add_argument("reports", nargs="+", metavar="LABEL=JSON")
    args = p.parse_args(argv)
    return run(args) if args.cmd == "run" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
