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

from kerasbert.cpu_kernels import onednn_enabled


def machine() -> str:
    """Cores, CPU model, its widest vector instructions, and whether this process's
    TensorFlow (if it has one) runs oneDNN's kernels: speed ratios between libraries differ
    with both (kerasbert fine-tuned at 0.85x transformers' speed with Eigen's kernels on an
    AVX2 machine, 1.75x with oneDNN's, and 1.7-2.3x on an AVX-512 one)."""
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


def write_json(path: str, value) -> None:
    """Written beside and renamed: a reader never sees half a file."""
    with open(path + ".partial", "w") as f:
        json.dump(value, f, indent=2)
    os.replace(path + ".partial", path)


def load_results(output_dir: str, default: dict) -> dict:
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "results.json")
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def timestamp() -> str:
    """Now, to the second, as results files stamp it."""
    return datetime.datetime.now().isoformat(timespec="seconds")


def save_results(output_dir: str, results: dict, module: str, render) -> None:
    """Stamps the command, machine and time, then writes results.json and results.md."""
    results.update(command=f"python -m {module} " + " ".join(sys.argv[1:]), machine=machine(),
                   updated=timestamp())
    write_json(os.path.join(output_dir, "results.json"), results)  # parts running side by side read it
    with open(os.path.join(output_dir, "results.md"), "w") as f:
        f.write(render(results))
