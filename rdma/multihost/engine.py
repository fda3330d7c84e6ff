"""The multi-host validation run: host checks, then every pair check on
the rounds of :mod:`rdma.multihost.schedule`, then the outlier analysis.

:func:`run` returns a :class:`Result`: one :class:`Case` per check and
host or pair (what the JUnit XML and the table show), the bandwidth and
latency matrices and the :class:`Outliers` (the hosts and links it
blames).  :mod:`rdma.multihost.report` turns it into text, XML and a
picture.
"""
from __future__ import annotations

import itertools
import statistics
import textwrap
import threading
import time
from typing import (Any, Callable, Dict, List, NamedTuple, Optional,
                    Sequence, Set, Tuple)

from rdma.multihost.checks import TRANSFER_CASES, transfer_sizes
from rdma.multihost.hosts import CheckError, Host, HostError
from rdma.validation import fmt_size, volume

__all__ = ["Options", "Case", "Outliers", "Result", "PairOutcome", "run",
           "run_pair",
           "find_outliers", "PAIR_CHECK_NAMES"]

#: The pair checks ``--checks`` may name.
PAIR_CHECK_NAMES = ("transfer", "atomics", "perf")

_keys = itertools.count(1)


class Options:
    """What to run and the limits.

    :param checks: pair checks to run (``transfer``, ``atomics``, ``perf``)
    :param quick: fewer sizes (as ``--quick`` of the one-host suite)
    :param timeout: seconds an agent waits for one completion; a step's
        answer is awaited ``timeout + 30`` seconds
    :param bw_size: RDMA WRITE size of the bandwidth measure (bytes)
    :param bw_iters: WRITEs per direction and run
    :param bw_reps: runs per direction (the best counts)
    :param lat_iters: SEND ping-pong round trips
    :param slow_fraction: a pair direction below this fraction of the
        typical bandwidth is slow (see :func:`find_outliers`)
    :param lat_factor: a pair above this multiple of the typical latency
        is slow
    :param max_size: largest transfer message
    """

    def __init__(self, checks: Sequence[str] = PAIR_CHECK_NAMES,
                 quick: bool = False, timeout: float = 10.0,
                 bw_size: int = 65536, bw_iters: int = 100,
                 bw_reps: int = 3,
                 lat_size: int = 8, lat_iters: int = 200,
                 slow_fraction: float = 0.5, lat_factor: float = 5.0,
                 max_size: int = 1 << 20, seed: Optional[int] = None):
        for c in checks:
            if c not in PAIR_CHECK_NAMES:
                raise ValueError(f"unknown check {c!r} (known: "
                                 f"{', '.join(PAIR_CHECK_NAMES)})")
        if timeout <= 0:
            raise ValueError("the timeout must be positive")
        if not 0 < slow_fraction < 1:
            raise ValueError("the slow fraction must be between 0 and 1")
        if lat_factor <= 1:
            raise ValueError("the latency factor must be above 1")
        self.checks = tuple(checks)
        self.quick = quick
        self.timeout = timeout
        self.bw_size, self.bw_iters = bw_size, bw_iters
        self.bw_reps = bw_reps
        self.lat_size, self.lat_iters = lat_size, lat_iters
        self.slow_fraction, self.lat_factor = slow_fraction, lat_factor
        self.max_size = max_size
        self.seed = seed if seed is not None else int(time.time()) & 0xFFFFFF

    @property
    def step_timeout(self) -> float:
        return self.timeout + 30.0


class Case:
    """One check on one host or pair: ``check`` (``port``,
    ``transfer[RC-SEND]``...), ``hosts`` (one or two names), ``result``
    (PASSED, FAILED, ERROR, SKIPPED), ``detail``, ``seconds`` and
    measurements in ``data``."""

    def __init__(self, check: str, hosts: Tuple[str, ...], result: str,
                 detail: str = "", seconds: float = 0.0,
                 data: Optional[Dict[str, Any]] = None):
        self.check, self.hosts, self.result = check, hosts, result
        self.detail, self.seconds = detail, seconds
        self.data = data or {}

    @property
    def where(self) -> str:
        return "-".join(self.hosts)

    @property
    def ok(self) -> bool:
        return self.result in ("PASSED", "SKIPPED")

    def __repr__(self) -> str:
        return f"Case({self.check!r}, {self.where}, {self.result})"


class Outliers:
    """The verdict of :func:`find_outliers`.

    ``hosts``: host -> reason (the host explains its bad pairs);
    ``links``: (a, b) -> reason (bad pairs no single host explains);
    ``bad_pairs``: every pair that failed or was slow, with why."""

    def __init__(self) -> None:
        self.hosts: Dict[str, str] = {}
        self.links: Dict[Tuple[str, str], str] = {}
        self.bad_pairs: Dict[Tuple[str, str], List[str]] = {}
        self.median_bw: Optional[float] = None
        self.median_lat: Optional[float] = None

    @property
    def clean(self) -> bool:
        return not (self.hosts or self.links or self.bad_pairs)


class Result:
    """Everything a run found (see the module docstring)."""

    def __init__(self, hosts: Sequence[Host],
                 rounds: List[List[Tuple[int, int]]], options: Options):
        self.hosts = list(hosts)
        self.names = [h.name for h in hosts]
        self.rounds = rounds
        self.options = options
        self.cases: List[Case] = []
        #: bw[src][dst] in MiB/s (RDMA WRITE from src into dst).
        self.bw: Dict[str, Dict[str, float]] = {n: {} for n in self.names}
        #: lat[a][b] in microseconds (half a SEND round trip; symmetric).
        self.lat: Dict[str, Dict[str, float]] = {n: {} for n in self.names}
        self.outliers = Outliers()
        self.seconds = 0.0
        self.memory: Dict[str, Dict[str, Any]] = {}

    @property
    def failed(self) -> List[Case]:
        return [c for c in self.cases if not c.ok]

    @property
    def passed(self) -> bool:
        return not self.failed and self.outliers.clean


# -- one pair -----------------------------------------------------------------

def _both(fa: Callable[[], Any], fb: Callable[[], Any]
          ) -> Tuple[Tuple[bool, Any], Tuple[bool, Any]]:
    """Run fa and fb at the same time; return ((ok, value), (ok, value))."""
    out: List[Any] = [None, None]

    def wrap(i: int, f: Callable[[], Any]) -> None:
        try:
            out[i] = (True, f())
        except BaseException as e:     # reported, never lost
            out[i] = (False, e)
    t = threading.Thread(target=wrap, args=(1, fb), daemon=True)
    t.start()
    wrap(0, fa)
    t.join()
    return out[0], out[1]


def _blame(errors: List[BaseException]) -> Tuple[str, str]:
    """(result, message) for the errors of the two ends of a step."""
    if any(isinstance(e, HostError) for e in errors):
        result = "ERROR"
    else:
        result = "FAILED"
    # The end that failed for a reason of its own says more than the one
    # that waited for it.
    def weight(e: BaseException) -> Tuple[bool, bool]:
        text = str(e)
        return (isinstance(e, HostError),
                "no completion after" in text or "did not answer" in text)
    errors = sorted(errors, key=weight)
    parts = []
    for e in errors:
        host = getattr(e, "host", "?")
        msg = e.msg if isinstance(e, HostError) else str(e)
        parts.append(f"{host}: {msg}" if not msg.startswith(f"host {host}")
                     else msg)
    return result, "; ".join(parts[:2])


class PairOutcome(NamedTuple):
    """What :func:`run_pair` found."""

    #: PASSED, FAILED (a check failed on a host) or ERROR (a host failed)
    result: str
    #: the step that failed ("" when it passed)
    step: str
    #: why, naming the host(s) ("" when it passed)
    message: str
    #: ``{step: (answer of a, answer of b)}`` of the steps that passed
    answers: Dict[str, Any]


def run_pair(a: Host, b: Host, check: str, params: Dict[str, Any],
             options: Options) -> PairOutcome:
    """Run the pair check *check* between *a* and *b*: ``hello`` on both,
    ``connect`` with the other's hello, then each step of the check in
    lockstep, each end getting what the other returned from the step
    before."""
    from rdma.multihost.checks import PAIR_CHECKS
    key = next(_keys)
    t = options.step_timeout
    params = dict(params, hosts=[a.name, b.name], timeout=options.timeout)
    answers: Dict[str, Any] = {}
    steps = ["hello", "connect"] + list(PAIR_CHECKS[check].steps)
    prev: Tuple[Any, Any] = (None, None)
    try:
        for step in steps:
            if step == "hello":
                ra, rb = _both(
                    lambda: a.call("pair_begin", t, key=key, check=check,
                                   role="a", params=params),
                    lambda: b.call("pair_begin", t, key=key, check=check,
                                   role="b", params=params))
            else:
                pa, pb = prev
                ra, rb = _both(
                    lambda: a.call("pair_step", t, key=key, step=step,
                                   peer=pb),
                    lambda: b.call("pair_step", t, key=key, step=step,
                                   peer=pa))
            errors = [r[1] for r in (ra, rb) if not r[0]]
            if errors:
                for e in errors:
                    if not isinstance(e, (HostError, CheckError)):
                        raise e
                result, msg = _blame(errors)
                return PairOutcome(result, step, msg, answers)
            prev = (ra[1], rb[1])
            answers[step] = prev
        return PairOutcome("PASSED", "", "", answers)
    finally:
        for h in (a, b):
            try:
                h.call("pair_end", 10.0, key=key)
            except (HostError, CheckError):
                pass


# -- the run ------------------------------------------------------------------

def _pair_cases(options: Options, ia: Dict[str, Any],
                ib: Dict[str, Any]) -> List[Tuple[str, str, Dict[str, Any]]]:
    """(case name, check, params) of every pair check of one pair."""
    out = []
    mtu = min(int(ia.get("mtu", 1024)), int(ib.get("mtu", 1024)))
    limit = min(options.max_size, int(ia.get("max_msg_sz", 1 << 30)),
                int(ib.get("max_msg_sz", 1 << 30)))
    seed = options.seed
    if "transfer" in options.checks:
        for k, (tr, verb) in enumerate(TRANSFER_CASES):
            sizes = transfer_sizes(limit, mtu, tr, options.quick)
            out.append((f"transfer[{tr}-{verb}]", "transfer",
                        {"transport": tr, "verb": verb, "sizes": sizes,
                         "seed": seed + k, "depth": max(16, len(sizes) + 2)}))
    if "atomics" in options.checks:
        p: Dict[str, Any] = {"seed": seed + 101}
        lacking = [i.get("end_port", "?") for i in (ia, ib)
                   if not i.get("atomics", True)]
        if lacking:
            p["skip"] = (f"{' and '.join(lacking)} has no atomic operations "
                         f"(atomic_cap IBV_ATOMIC_NONE)")
        out.append(("atomics", "atomics", p))
    if "perf" in options.checks:
        out.append(("perf", "perf", {"bw_size": options.bw_size,
                                     "bw_iters": options.bw_iters,
                                     "bw_reps": options.bw_reps,
                                     "lat_size": options.lat_size,
                                     "lat_iters": options.lat_iters}))
    return out


def _detail(check: str, params: Dict[str, Any],
            answers: Dict[str, Any], a: str, b: str
            ) -> Tuple[str, Dict[str, Any]]:
    """The one-line detail of a passed check, and its measurements."""
    if check == "transfer":
        sizes = params["sizes"]
        moved, secs = 0, 0.0
        for step in ("go_ab", "go_ba"):
            ra, rb = answers.get(step, ({}, {}))
            # The receiving end's time covers the whole direction.
            recv = rb if step == "go_ab" else ra
            moved += int(recv.get("bytes", 0))
            secs += float(recv.get("seconds", 0.0))
        rate = f"{moved / secs / (1 << 20):.1f} MiB/s" if secs > 0 else "-"
        lim = " (UD max = MTU)" if params["transport"] == "UD" else ""
        return (f"{fmt_size(sizes[0])}..{fmt_size(sizes[-1])}{lim}, "
                f"{len(sizes)} sizes x2 directions, {volume(moved)} "
                f"verified, {rate}", {})
    if check == "atomics":
        n = sum(int(x.get("n", 0)) for s in ("go_ab", "go_ba")
                for x in answers.get(s, ()) if x)
        return f"{n} atomics checked both ways (old value, new value)", {}
    row_ab = answers["bw_ab"][0]["row"]
    row_ba = answers["bw_ba"][1]["row"]
    lat = answers["latency"][0]["row"]
    data = {"bw_ab": row_ab["bw_avg_mb_s"], "bw_ba": row_ba["bw_avg_mb_s"],
            "lat_us": lat["t_typical_us"]}
    return (f"WRITE {fmt_size(params['bw_size'])} x{params['bw_iters']} "
            f"(best of {params['bw_reps']}): "
            f"{a}->{b} {data['bw_ab']:.1f} MiB/s, {b}->{a} "
            f"{data['bw_ba']:.1f} MiB/s; SEND latency "
            f"{data['lat_us']:.1f} us (median of {lat['iterations']})",
            data)


def run(hosts: Sequence[Host], rounds: List[List[Tuple[int, int]]],
        options: Options,
        progress: Optional[Callable[[str], None]] = None,
        deadline: Optional[float] = None) -> Result:
    """Run the checks on *hosts* (started with
    :func:`rdma.multihost.hosts.start_hosts`) over *rounds* of index
    pairs; report progress lines to *progress*.  Rounds that would start
    after *deadline* (``time.monotonic()``) are not run: their pairs are
    reported as errors."""
    say = progress or (lambda _msg: None)
    res = Result(hosts, rounds, options)
    t0 = time.monotonic()
    for h in hosts:
        if h.dead is not None:
            res.cases.append(Case("port", (h.name,), "ERROR", h.dead))
        elif h.info.get("problem"):
            res.cases.append(Case("port", (h.name,), "FAILED",
                                  h.info["problem"]))
        else:
            i = h.info
            res.cases.append(Case("port", (h.name,), "PASSED",
                                  f"{i.get('end_port')} ({i.get('provider')}"
                                  f", {i.get('link_layer')}) on "
                                  f"{i.get('hostname')}"
                                  + (f" {i['address']}" if i.get('address')
                                     else "")
                                  + f", GID {i.get('gid', '-')}"))
    say(f"{sum(h.usable for h in hosts)} of {len(hosts)} hosts ready; "
        f"{sum(len(r) for r in rounds)} pairs in {len(rounds)} rounds")
    lock = threading.Lock()
    stops: Dict[Tuple[str, str], str] = {}
    # Two passes over the rounds: the functional checks, then the
    # measures, so that the pairs of a round measure at the same time
    # (under the same load) and nothing else runs meanwhile.
    phases = [("checks", [c for c in options.checks if c != "perf"]),
              ("perf", [c for c in options.checks if c == "perf"])]
    for phase, checks in phases:
        if not checks:
            continue
        for rno, rnd in enumerate(rounds, 1):
            names = " ".join(f"{hosts[a].name}-{hosts[b].name}"
                             for a, b in rnd)
            label = f"{phase} round {rno}/{len(rounds)}"
            if deadline is not None and time.monotonic() > deadline:
                say(f"{label}: not run (out of time)")
                for ia, ib in rnd:
                    res.cases.append(Case(f"{phase}-not-run",
                                          (hosts[ia].name, hosts[ib].name),
                                          "ERROR", "not run: the run's time "
                                          "limit (--timeout) ran out"))
                continue
            say(f"{label}: {names}")
            threads = []
            for ia, ib in rnd:
                t = threading.Thread(target=_run_one_pair,
                                     args=(hosts[ia], hosts[ib], options,
                                           checks, res, stops, lock, say),
                                     daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
    _confirm_slow(res, options, say)
    for h in hosts:
        if h.usable:
            try:
                res.memory[h.name] = h.stats()
            except (HostError, CheckError):
                pass
    find_outliers(res)
    res.seconds = time.monotonic() - t0
    return res


#: Failures that mean the two ends cannot reach each other.
_UNREACHABLE = ("RETRY_EXC_ERR", "no completion after", "did not answer",
                "EHOSTUNREACH", "unreachable")


def _run_one_pair(a: Host, b: Host, options: Options, checks: List[str],
                  res: Result, stops: Dict[Tuple[str, str], str],
                  lock: threading.Lock, say: Callable[[str], None]) -> None:
    pair = (a.name, b.name)
    cases: List[Case] = []
    todo = [c for c in _pair_cases(options, a.info or {}, b.info or {})
            if c[1] in checks]
    for h in (a, b):
        if not h.usable:
            why = h.dead or h.info.get("problem")
            for name, _check, _p in todo:
                cases.append(Case(name, pair, "ERROR",
                                  f"host {h.name} is not usable: {why}"))
            break
    else:
        stop = stops.get(pair)
        for name, check, params in todo:
            if params.get("skip"):
                cases.append(Case(name, pair, "SKIPPED", params["skip"]))
                continue
            if stop is not None:
                cases.append(Case(name, pair, "ERROR",
                                  f"not run: {stop} could not reach the "
                                  f"other end first"))
                continue
            t0 = time.monotonic()
            out = run_pair(a, b, check, params, options)
            dt = time.monotonic() - t0
            if out.result == "PASSED":
                detail, data = _detail(check, params, out.answers,
                                       a.name, b.name)
                cases.append(Case(name, pair, "PASSED", detail, dt, data))
            else:
                cases.append(Case(name, pair, out.result,
                                  f"{out.message} (step {out.step})", dt))
                if out.result == "ERROR" or any(
                        w in out.message for w in _UNREACHABLE):
                    # The pair cannot talk: every further check would
                    # only wait for its timeout.
                    stop = stops[pair] = name
    with lock:
        res.cases.extend(cases)
        for c in cases:
            if c.check == "perf" and c.result == "PASSED":
                res.bw[a.name][b.name] = c.data["bw_ab"]
                res.bw[b.name][a.name] = c.data["bw_ba"]
                res.lat[a.name][b.name] = res.lat[b.name][a.name] = \
                    c.data["lat_us"]
    bad = [c for c in cases if not c.ok]
    if bad:
        say(f"  {a.name}-{b.name}: {len(bad)} of {len(cases)} FAILED "
            f"(first: {bad[0].check}: {_short(bad[0].detail)})")
    elif checks == ["perf"]:
        # Slow or not is judged at the end, against the other pairs.
        say(f"  {a.name}-{b.name}: measured (judged against the other "
            f"pairs at the end): {_short(cases[0].detail)}")
    else:
        say(f"  {a.name}-{b.name}: {len(cases)} passed")


def _short(text: str, width: int = 160) -> str:
    """*text* cut at a word to at most *width* characters."""
    return textwrap.shorten(text, width, placeholder=" ...")


def _slow_why(res: "Result", a: str, b: str, bw: Optional[float],
              lat: Optional[float]) -> List[str]:
    """Why the pair *a*-*b* is slow against the typical *bw*/*lat* of the
    run (empty: it is not)."""
    opt, why = res.options, []
    if bw:
        for src, dst in ((a, b), (b, a)):
            v = res.bw[src].get(dst)
            if v is not None and v < opt.slow_fraction * bw:
                why.append(f"{src}->{dst} {v:.1f} MiB/s is "
                           f"{100 * v / bw:.0f}% of the typical "
                           f"{bw:.1f} MiB/s")
    v = res.lat[a].get(b)
    if lat and v is not None and v > opt.lat_factor * lat:
        why.append(f"latency {v:.1f} us is {v / lat:.1f}x the typical "
                   f"{lat:.1f} us")
    return why


def _confirm_slow(res: "Result", options: Options,
                  say: Callable[[str], None]) -> None:
    """Measure every pair that looks slow once more, alone (no other pair
    runs meanwhile), and keep the better figure of each direction: a busy
    machine only ever slows a run down, while a slow link is slow every
    time.  What is still slow is then reported by :func:`find_outliers`."""
    bw, lat = _typical(res.bw), _typical(res.lat)
    hosts = {h.name: h for h in res.hosts}
    for c in res.cases:
        if c.check != "perf" or c.result != "PASSED":
            continue
        a, b = c.hosts
        why = _slow_why(res, a, b, bw, lat)
        if not why:
            continue
        say(f"  {a}-{b}: looks slow ({_short(why[0], 100)}): measuring "
            f"again, alone")
        params = dict(_pair_cases(options, hosts[a].info or {},
                                  hosts[b].info or {})[-1][2])
        t0 = time.monotonic()
        out = run_pair(hosts[a], hosts[b], "perf", params, options)
        if out.result != "PASSED":
            say(f"  {a}-{b}: the second measure failed: {out.message}")
            continue
        _d, again = _detail("perf", params, out.answers, a, b)
        d = c.data
        d["bw_ab"] = max(d["bw_ab"], again["bw_ab"])
        d["bw_ba"] = max(d["bw_ba"], again["bw_ba"])
        d["lat_us"] = min(d["lat_us"], again["lat_us"])
        res.bw[a][b], res.bw[b][a] = d["bw_ab"], d["bw_ba"]
        res.lat[a][b] = res.lat[b][a] = d["lat_us"]
        c.seconds += time.monotonic() - t0
        c.detail = (f"{a}->{b} {d['bw_ab']:.1f} MiB/s, {b}->{a} "
                    f"{d['bw_ba']:.1f} MiB/s; SEND latency "
                    f"{d['lat_us']:.1f} us (the better of two measures: "
                    f"the first looked slow)")
        still = _slow_why(res, a, b, bw, lat)
        say(f"  {a}-{b}: " + (f"still slow ({_short(still[0], 100)})"
                              if still else "not slow when measured alone"))


# -- outliers -----------------------------------------------------------------

def _typical(m: Dict[str, Dict[str, float]]) -> Optional[float]:
    """The typical value of a host x host matrix: the median over hosts of
    each host's median (its pairs, both directions).  Unlike the median of
    all cells it stays on the healthy side while fewer than half of the
    hosts are bad (one bad host of 4 is in half of the pairs)."""
    per_host = []
    for h in m:
        vals = list(m[h].values()) + [row[h] for g, row in m.items()
                                      if g != h and h in row]
        if vals:
            per_host.append(statistics.median(vals))
    return statistics.median(per_host) if per_host else None


def find_outliers(res: Result) -> Outliers:
    """Find the slow and broken pairs and the hosts that explain them.

    A pair is bad when a check between them failed, when either
    direction's bandwidth is below ``slow_fraction`` of the typical value
    (:func:`_typical`: the median of the hosts' medians), or its latency
    above ``lat_factor`` times the typical latency.  Then, repeatedly, the
    host in the most unexplained bad pairs is blamed if at least two of its
    pairs are bad and more than half of its pairs are; its bad pairs are
    then explained.  Bad pairs left over
    are blamed on their link.  A host whose own check failed is blamed
    directly.  Slow pairs fail their ``perf`` case."""
    o = res.outliers
    o.median_bw = _typical(res.bw)
    o.median_lat = _typical(res.lat)
    pairs_of: Dict[str, Set[Tuple[str, str]]] = {n: set() for n in res.names}
    for c in res.cases:
        if len(c.hosts) == 2:
            key = (c.hosts[0], c.hosts[1])
            pairs_of[key[0]].add(key)
            pairs_of[key[1]].add(key)
            if not c.ok:
                o.bad_pairs.setdefault(key, []).append(
                    f"{c.check} {c.result.lower()}")
        elif not c.ok:
            o.hosts[c.hosts[0]] = f"{c.check}: {c.detail}"
    for c in res.cases:
        if c.check != "perf" or c.result != "PASSED":
            continue
        a, b = c.hosts
        why = _slow_why(res, a, b, o.median_bw, o.median_lat)
        if why:
            c.result = "FAILED"
            c.detail = "slow: " + "; ".join(why) + " (" + c.detail + ")"
            o.bad_pairs.setdefault((a, b), []).append("slow: " +
                                                      "; ".join(why))
    unexplained = set(o.bad_pairs)
    for h in o.hosts:
        unexplained -= {p for p in unexplained if h in p}
    while unexplained:
        count = {n: sum(1 for p in unexplained if n in p) for n in res.names}
        best = max(res.names, key=lambda n: (count[n], -res.names.index(n)))
        total = len(pairs_of[best])
        bad_total = sum(1 for p in o.bad_pairs if best in p)
        if count[best] < 2 or bad_total * 2 <= total:
            break
        mine = sorted(p for p in unexplained if best in p)
        slow = sum(1 for p in mine
                   if any(w.startswith("slow") for w in o.bad_pairs[p]))
        failed = sum(1 for p in mine
                     if any(not w.startswith("slow") for w in o.bad_pairs[p]))
        what = ", ".join(x for x in (f"{failed} with failed checks"
                                     if failed else "",
                                     f"{slow} slow" if slow else "") if x)
        o.hosts[best] = (f"{bad_total} of its {total} pairs bad ({what}): "
                         + ", ".join(f"{x}-{y}" for x, y in mine))
        unexplained -= set(mine)
    for p in sorted(unexplained):
        why = o.bad_pairs[p]
        text = why[0] if len(why) == 1 else \
            f"{len(why)} checks bad (first: {why[0]})"
        if len(res.names) == 2:
            text += " (with two hosts, which end is at fault cannot be told)"
        o.links[p] = text
    return o
