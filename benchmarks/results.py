"""Benchmark results files: `results.json` (merged across runs of parts) and `results.md`, the
same results as headings, lines and tables (`render_markdown`); docs/benchmarks.md tells what
the figures mean.

Example:
    results = load_results("runs/bench-x")
    results["part"] = {"examples_per_second": 9.1}
    save_results("runs/bench-x", results, "benchmarks.x", "Title of results.md")
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys

from benchmarks.peer_protocol import read_json, write_json
from kerasbert.cpu_kernels import onednn_enabled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = "benchmarks.peer_torch"  # the peer's module, in the peer's environment


def machine() -> str:
    """Cores, CPU model, its widest vector instructions, and whether this process's
    TensorFlow (if any) runs oneDNN's kernels: speed ratios between libraries differ with both."""
    cpu, flags = platform.processor() or "cpu", set()
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]  # the first core's block
        info = {key.strip(): value for key, value in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
        cpu, flags = info["model name"].strip(), set(info.get("flags", "").split())
    except (OSError, KeyError):
        pass
    vectors = ("AVX-512" + (" with BF16" if "avx512_bf16" in flags else "") if "avx512f" in flags
               else "AVX2" if "avx2" in flags else "")
    kernels = ""
    if "tensorflow" in sys.modules:
        kernels = ", TensorFlow's oneDNN kernels " + {True: "on", False: "off", None: "unknown"}[onednn_enabled()]
    return f"{os.cpu_count()} cores ({cpu}{', ' + vectors if vectors else ''}), no GPU{kernels}"


def bench_parser(name: str, doc: str, data_dir: bool = True, peer_python: bool = False) -> argparse.ArgumentParser:
    """The flags the benchmarks share, for `python -m benchmarks.<name>`: --output_dir
    (runs/bench-<name>, "_" as "-"), and --data_dir and --peer_python for those that read the
    shared data or run the peers.

    >>> bench_parser("call_memory", "A benchmark.").parse_args(["--data_dir", "d"]).output_dir
    'runs/bench-call-memory'
    """
    from kerasbert.data.corpus import default_data_dir

    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=f"runs/bench-{name.replace('_', '-')}",
                        help="Results folder.")
    if data_dir:
        parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    if peer_python:
        parser.add_argument("--peer_python", default=".venv-peer/bin/python", help="The peer environment's Python.")
    return parser


def check_peer_python(peer_python: str) -> None:
    if not os.path.exists(peer_python):
        raise FileNotFoundError(f"{peer_python}: the peer's Python is missing. `make bench-peers` makes "
                                ".venv-peer (torch==2.13.0, transformers) before it runs this.")


def run_peer(peer_python: str, command: str, args: list[str], output: str) -> dict:
    """The peer's `command` with `args` and `--output <output>`, in its environment; its results."""
    check_peer_python(peer_python)
    subprocess.run([peer_python, "-m", PEER, command, *args, "--output", output], check=True,
                   env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    return read_json(output)


def peer_training(train) -> dict:
    """kerasbert's `train` section as the peer's settings: the same batches, AdamW and schedule."""
    return {"batch_size": train.batch_size, "total_steps": train.total_steps, "steps_per_block": train.steps_per_block,
            "learning_rate": train.learning_rate, "warmup_steps": int(train.warmup_fraction * train.total_steps),
            "weight_decay": train.weight_decay, "clipnorm": train.clipnorm, "clip_scope": train.clip_scope,
            "epsilon": 1e-6}


def compared(unit: str, ours: list[float], theirs: list[float]) -> dict:
    """kerasbert's and transformers' medians of rates measured in turn (`unit`), their ratio, and every rate."""
    rates = {"kerasbert": statistics.median(ours), "transformers": statistics.median(theirs)}
    return {unit: rates, "ratio": rates["kerasbert"] / rates["transformers"],
            "all": {"kerasbert": ours, "transformers": theirs}}


def plot_panels(path: str, panels: list[dict], title: str = "") -> None:
    """Line charts side by side, one a panel: {"title", "xlabel", "ylabel", "lines": [(label, xs, ys,
    matplotlib style)]}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2))
    for axis, panel in zip(axes, panels):
        for label, xs, ys, style in panel["lines"]:
            axis.plot(xs, ys, marker="o", label=label, **style)
        axis.set(title=panel["title"], xlabel=panel["xlabel"], ylabel=panel.get("ylabel", ""))
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def load_results(output_dir: str) -> dict:
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "results.json")
    return read_json(path) if os.path.exists(path) else {}


def timestamp() -> str:
    """Now, to the second, as results files stamp it."""
    return datetime.datetime.now().isoformat(timespec="seconds")


def save_results(output_dir: str, results: dict, module: str, title: str) -> str:
    """Stamps the command, machine and time, writes results.json and results.md; returns the
    markdown."""
    results.update(command=f"python -m {module} " + " ".join(sys.argv[1:]), machine=machine(),
                   updated=timestamp())
    write_json(os.path.join(output_dir, "results.json"), results)  # parts running side by side read it
    markdown = render_markdown(results, title)
    with open(os.path.join(output_dir, "results.md"), "w") as f:
        f.write(markdown)
    return markdown


def render_markdown(results: dict, title: str) -> str:
    """`results` as markdown: the stamps first, then a heading per nested dict, `key: value`
    lines, and a table per list of dicts; numbers to four significant digits.

    >>> results = {"rate": 2.34567, "command": "python -m benchmarks.x",
    ...            "part": {"ratio": 1.5, "runs": [{"seed": 1, "f1": 0.9}, {"seed": 2}]}}
    >>> print(render_markdown(results, "T"))
    # T
    <BLANKLINE>
    command: `python -m benchmarks.x`  
    <BLANKLINE>
    rate: 2.346  
    <BLANKLINE>
    ## part
    <BLANKLINE>
    ratio: 1.5  
    <BLANKLINE>
    ### runs
    <BLANKLINE>
    | seed | f1 |
    |---|---|
    | 1 | 0.9 |
    | 2 |  |
    <BLANKLINE>
    """
    stamps = [f"{key}: `{results[key]}`  " for key in ("command", "machine", "updated") if key in results]
    stamps += [""] if stamps else []
    body = {key: value for key, value in results.items() if key not in ("command", "machine", "updated")}
    return "\n".join([f"# {title}", "", *stamps, *_section(body, 2)]) + "\n"


def _section(values: dict, level: int) -> list[str]:
    lines = [f"{key}: {_cell(value)}  " for key, value in values.items() if not _nested(value)]
    lines += [""] if lines else []
    for key, value in values.items():
        if isinstance(value, dict) and _nested(value):
            lines += [f"{'#' * min(level, 6)} {key}", "", *_section(value, level + 1)]
        elif _nested(value):  # a list of dicts: a table over all their keys
            columns = list(dict.fromkeys(column for row in value for column in row))
            lines += [f"{'#' * min(level, 6)} {key}", "", "| " + " | ".join(columns) + " |",
                      "|" + "---|" * len(columns),
                      *("| " + " | ".join(_cell(row.get(column, "")) for column in columns) + " |" for row in value), ""]
    return lines


def _nested(value) -> bool:
    return (isinstance(value, dict) and any(isinstance(v, (dict, list)) for v in value.values())) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value))


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{key} {_cell(v)}" for key, v in value.items())
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value)
