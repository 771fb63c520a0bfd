"""Where `make test`'s time goes: a pytest plugin that records each test's CPU seconds, its own
and its child processes' (those waited for: servers, pipelines, fresh TensorFlow processes), and
its wall time, one line a test; run as a script, it ranks them.

    make bench-tests   # the suite with this plugin: runs/bench-tests/tests.tsv, then results.md

Example:
    >>> rows = [Row(1.0, 3.0, 5.0, "tests/test_a.py::test_one"), Row(2.0, 0.0, 2.0, "tests/test_b.py::test_two")]
    >>> print(ranked(rows, top=1))  # doctest: +NORMALIZE_WHITESPACE
    2 tests: 6 CPU-s (3 in the test processes, 3 in their children), 7 s of wall time summed.
    <BLANKLINE>
    | CPU-s | own | children | wall s | test |
    |---:|---:|---:|---:|---|
    | 4.0 | 1.0 | 3.0 | 5.0 | tests/test_a.py::test_one |
    <BLANKLINE>
    | CPU-s | own | children | tests | file |
    |---:|---:|---:|---:|---|
    | 4.0 | 1.0 | 3.0 | 1 | tests/test_a.py |
"""

import collections
import os
import resource
import sys
import time
from typing import NamedTuple

import pytest

OUTPUT_VARIABLE = "KERASBERT_TEST_CPU"  # the file the plugin appends to (both xdist workers)


class Row(NamedTuple):
    own: float
    children: float
    wall: float
    nodeid: str


def _cpu_seconds() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of one test (a fixture's teardown counts in the last test using it)."""
    path = os.environ.get(OUTPUT_VARIABLE)
    own, children = _cpu_seconds()
    started = time.perf_counter()
    yield
    if path:
        own_after, children_after = _cpu_seconds()
        line = (f"{own_after - own:.2f}\t{children_after - children:.2f}\t{time.perf_counter() - started:.2f}\t"
                f"{item.nodeid}\n")
        with open(path, "a") as f:  # one short append a test: the workers' lines do not interleave
            f.write(line)


def read_rows(path: str) -> list[Row]:
    with open(path) as f:
        return [Row(float(own), float(children), float(wall), nodeid)
                for own, children, wall, nodeid in (line.rstrip("\n").split("\t", 3) for line in f if line.strip())]


def ranked(rows: list[Row], top: int = 30) -> str:
    """Markdown: the totals, the `top` tests by CPU seconds, and the `top` files."""
    own, children = sum(r.own for r in rows), sum(r.children for r in rows)
    lines = [f"{len(rows)} tests: {own + children:.0f} CPU-s ({own:.0f} in the test processes, {children:.0f} in "
             f"their children), {sum(r.wall for r in rows):.0f} s of wall time summed.", "",
             "| CPU-s | own | children | wall s | test |", "|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: -(r.own + r.children))[:top]:
        lines.append(f"| {r.own + r.children:.1f} | {r.own:.1f} | {r.children:.1f} | {r.wall:.1f} | {r.nodeid} |")
    by_file: dict[str, list[Row]] = collections.defaultdict(list)
    for r in rows:
        by_file[r.nodeid.split("::")[0]].append(r)
    lines += ["", "| CPU-s | own | children | tests | file |", "|---:|---:|---:|---:|---|"]
    for name, tests in sorted(by_file.items(), key=lambda item: -sum(r.own + r.children for r in item[1]))[:top]:
        file_own, file_children = sum(r.own for r in tests), sum(r.children for r in tests)
        lines.append(f"| {file_own + file_children:.1f} | {file_own:.1f} | {file_children:.1f} | {len(tests)} | {name} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(ranked(read_rows(sys.argv[1])))
