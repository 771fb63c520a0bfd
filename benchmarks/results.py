"""Benchmark results files: `results.json` (merged across runs of parts) and `results.md`.

Example:
    >>> results = load_results("runs/bench-x", default={})
    >>> results["part"] = {...}
    >>> save_results("runs/bench-x", results, "benchmarks.x", render_markdown)
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys


def machine() -> str:
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), no GPU"


def load_results(output_dir: str, default: dict) -> dict:
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "results.json")
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def save_results(output_dir: str, results: dict, module: str, render) -> None:
    """Stamps the command, machine and time, then writes results.json and results.md."""
    results.update(command=f"python -m {module} " + " ".join(sys.argv[1:]), machine=machine(),
                   updated=datetime.datetime.now().isoformat(timespec="seconds"))
    path = os.path.join(output_dir, "results.json")
    with open(path + ".partial", "w") as f:  # aside, then renamed: parts running side by side read it
        json.dump(results, f, indent=2)
    os.replace(path + ".partial", path)
    with open(os.path.join(output_dir, "results.md"), "w") as f:
        f.write(render(results))
