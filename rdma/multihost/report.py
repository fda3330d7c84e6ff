"""What a multi-host run prints and writes: the JUnit XML (one case per
check and host or pair), the summary table, the host x host matrices of
bandwidth and latency (text and a matplotlib heatmap) and the outlier
report that names the slow or broken host or link."""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Tuple

from rdma.multihost.engine import Case, Result

__all__ = ["write_junit", "table_rows", "matrix_text", "outlier_text",
           "plot"]


def write_junit(res: Result, path: str) -> None:
    """One ``testcase`` per check and host or pair: classname
    ``rdma.multihost.<h0-h1>``, name the check; the detail as a
    property (as the one-host suite) and in the failure message."""
    counts = {"tests": len(res.cases),
              "failures": sum(c.result == "FAILED" for c in res.cases),
              "errors": sum(c.result == "ERROR" for c in res.cases),
              "skipped": sum(c.result == "SKIPPED" for c in res.cases)}
    suite = ET.Element("testsuite", {
        "name": "rdma.multihost", "time": f"{res.seconds:.3f}",
        **{k: str(v) for k, v in counts.items()}})
    props = ET.SubElement(suite, "properties")
    for h in res.hosts:
        ET.SubElement(props, "property", name=f"host_{h.name}",
                      value=h.spec.spec)
    for name, why in res.outliers.hosts.items():
        ET.SubElement(props, "property", name=f"suspect_host_{name}",
                      value=why)
    for (a, b), why in res.outliers.links.items():
        ET.SubElement(props, "property", name=f"suspect_link_{a}-{b}",
                      value=why)
    for c in res.cases:
        tc = ET.SubElement(suite, "testcase",
                           classname=f"rdma.multihost.{c.where}",
                           name=c.check, time=f"{c.seconds:.3f}")
        p = ET.SubElement(tc, "properties")
        ET.SubElement(p, "property", name="detail", value=c.detail)
        if c.result == "FAILED":
            ET.SubElement(tc, "failure", message=c.detail).text = c.detail
        elif c.result == "ERROR":
            ET.SubElement(tc, "error", message=c.detail).text = c.detail
        elif c.result == "SKIPPED":
            ET.SubElement(tc, "skipped", message=c.detail)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def table_rows(res: Result) -> List[Dict[str, str]]:
    """Rows for :func:`rdma.cli.validate.format_table`: host checks first,
    then the pairs in the order of the rounds."""
    order = {n: i for i, n in enumerate(res.names)}

    def key(c: Case) -> Tuple[int, List[int]]:
        return (len(c.hosts), [order.get(h, 0) for h in c.hosts])
    return [{"test": f"{c.where}::{c.check}", "result": c.result,
             "detail": c.detail, "time": f"{c.seconds:.3f}"}
            for c in sorted(res.cases, key=key)]


def _fmt(v: Optional[float]) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}"


def matrix_text(res: Result) -> str:
    """The bandwidth (row: from, column: to) and latency matrices."""
    names = res.names
    w = max([6] + [len(n) for n in names]) + 1
    out = []
    for title, m in (("RDMA WRITE bandwidth, MiB/s (row: from, column: to)",
                      res.bw),
                     ("SEND latency, us (half round trip)", res.lat)):
        out.append(title)
        out.append(" " * w + "".join(f"{n:>{w}}" for n in names))
        for a in names:
            cells = "".join(f"{(' ' if a == b else _fmt(m[a].get(b))):>{w}}"
                            for b in names)
            out.append(f"{a:<{w}}{cells}")
        out.append("")
    return "\n".join(out).rstrip()


def outlier_text(res: Result) -> str:
    """Which hosts and links are slow or broken, in words."""
    o = res.outliers
    lines = []
    med = []
    if o.median_bw is not None:
        med.append(f"typical bandwidth {o.median_bw:.1f} MiB/s")
    if o.median_lat is not None:
        med.append(f"typical latency {o.median_lat:.1f} us")
    if med:
        lines.append(", ".join(med) + " (the median of the hosts' "
                     f"medians; slow: below "
                     f"{100 * res.options.slow_fraction:.0f}% of the "
                     f"bandwidth or above {res.options.lat_factor:g}x the "
                     f"latency)")
    if o.clean:
        lines.append("no slow or broken host or link")
        return "\n".join(lines)
    for h, why in o.hosts.items():
        lines.append(f"SUSPECT HOST {h}: {why}")
    for (a, b), why in o.links.items():
        lines.append(f"SUSPECT LINK {a}-{b}: {why}")
    explained = [p for p in o.bad_pairs if p not in o.links]
    if explained:
        lines.append("bad pairs: " + ", ".join(
            f"{a}-{b}" for a, b in sorted(o.bad_pairs)))
    return "\n".join(lines)


def plot(res: Result, path: str) -> None:
    """Save the two matrices as heatmaps (matplotlib, no display needed)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError(f"--plot needs matplotlib ({e})") from None
    names = res.names
    n = len(names)
    fig, axes = plt.subplots(1, 2, figsize=(4 + 0.9 * n, 2 + 0.45 * n),
                             squeeze=False)
    for ax, (title, m, cmap) in zip(axes[0], (
            ("RDMA WRITE MiB/s (row: from)", res.bw, "viridis"),
            ("SEND latency us", res.lat, "viridis_r"))):
        data = [[m[a].get(b, math.nan) if a != b else math.nan
                 for b in names] for a in names]
        im = ax.imshow(data, cmap=cmap)
        ax.set_xticks(range(n), names, rotation=90 if n > 8 else 0)
        ax.set_yticks(range(n), names)
        ax.set_title(title)
        for i in range(n):
            for j in range(n):
                v = data[i][j]
                if not math.isnan(v) and n <= 16:
                    ax.text(j, i, _fmt(v), ha="center", va="center",
                            fontsize=7, color="w")
        fig.colorbar(im, ax=ax, shrink=0.8)
    bad = ", ".join(list(res.outliers.hosts) +
                    [f"{a}-{b}" for a, b in res.outliers.links])
    fig.suptitle("ibtool validate: " + (f"suspect {bad}" if bad else
                                      "no outliers"))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
