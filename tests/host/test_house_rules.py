"""House rules of the C core that a script can check."""
import re

import pytest

from host_helpers import ROOT

#: The longest C function the house accepts, in lines.
MAX_LINES = 100


def function_lengths(path):
    """(name, first line, lines) of every function of a C file written in
    the house style: the body's braces at column 0, the return type on the
    line(s) before the name.  A function runs from the first line of its
    declaration to its closing brace, both included."""
    lines = path.read_text().split("\n")
    out = []
    for j, line in enumerate(lines):
        if not line.startswith("{"):
            continue
        s = j - 1
        while s > 0:
            prev = lines[s - 1]
            if (not prev.strip() or prev.startswith(("}", "/*", " *", "#"))
                    or prev.rstrip().endswith((";", "*/"))):
                break
            s -= 1
        k = j
        while not lines[k].startswith("}"):
            k += 1
        m = re.search(r"(\w+)\s*\(", " ".join(lines[s:j]))
        out.append((m.group(1) if m else "?", s + 1, k - s + 1))
    return out


def test_the_length_counter_counts():
    """The counter finds a known function with its declaration and brace
    lines (errors.c's pyrdma_status_error: 5 lines)."""
    found = {n: size for n, _, size in
             function_lengths(ROOT / "csrc" / "errors.c")}
    assert found["pyrdma_status_error"] == 5, found


#: The directories of the C core whose functions the rule covers.
C_DIRS = ("csrc", "csrc/fabric", "csrc/fabric_verbs")


@pytest.mark.parametrize("where", C_DIRS)
def test_no_c_function_over_100_lines(where):
    """No function of the C core (csrc/*.c, the fabric's csrc/fabric/*.c
    and its verbs front end's csrc/fabric_verbs/*.c) is longer than
    MAX_LINES: a longer one is split into static steps named for what
    they check or do."""
    files = sorted((ROOT / where).glob("*.c"))
    assert files, where
    long = [f"{p.name}:{line} {name} ({size} lines)"
            for p in files
            for name, line, size in function_lengths(p) if size > MAX_LINES]
    assert not long, "over %d lines: %s" % (MAX_LINES, ", ".join(long))
