"""Multitask fine-tuning benchmark: an ablation table in the manner of the reference study, and
what length grouping buys; docs/benchmarks.md sets the rows beside the reference study's.

    python -m benchmarks.multitask --output_dir runs/bench-multitask [--rows ...]
    python -m benchmarks.multitask --rows padding --output_dir runs/bench-padding [--padding_steps 120]

Rows (each a fine-tuning run from MiniLM on the full task files, scored on the dev sets):
    minilm_bi      bi-encoder (Sentence-BERT) pair heads                 finetune_minilm_bi.json
    minilm_cross   cross-encoder pair heads                              finetune_minilm_cross.json
    minilm_mixed   cross-encoder paraphrase, bi-encoder (cosine) similarity with its loss
                   weighted x10, 1,800 proportionally sampled steps at lr 1e-4
                                                                         finetune_minilm_mixed.json
    padding        finetune_minilm_mixed.json for --padding_steps steps with data.group_by_length 0
                   and 16 (dev sets cut to 64): the median block's examples/s (a few minutes; alone)
Every other row sorts runs of 16 training batches by length (`data.group_by_length`).
"""

from __future__ import annotations

import os
import sys
import time

from benchmarks.results import bench_parser, load_results, render_markdown, save_results
from kerasbert.config import FinetuneConfig, load_config
from kerasbert.finetuning.run import run_finetuning
from kerasbert.models.encoder import minilm_checkpoint

TITLE = "Multitask fine-tuning benchmark (dev sets)"  # of results.md
ROWS = {  # from MiniLM
    "minilm_bi": ("MiniLM, multitask, bi-encoder pair heads", "finetune_minilm_bi.json"),
    "minilm_cross": ("MiniLM, multitask, cross-encoder pair heads", "finetune_minilm_cross.json"),
    "minilm_mixed": ("MiniLM, multitask, cross-encoder paraphrase + bi-encoder similarity",
                     "finetune_minilm_mixed.json"),
}


def finetune(config_file: str, data_dir: str, run_dir: str, overrides=()) -> dict:
    config = load_config(FinetuneConfig, os.path.join("pipelines", "configs", config_file), list(overrides))
    return run_finetuning(config, data_dir, run_dir, minilm_checkpoint())


def run_row(key: str, args) -> dict:
    title, config_file = ROWS[key]
    start = time.perf_counter()
    metrics = finetune(config_file, args.data_dir, os.path.join(args.output_dir, key))
    return {**metrics, "title": title, "config": config_file, "wall_seconds": time.perf_counter() - start}


def padding(args) -> dict:
    """Training examples/s of the mixed row without and with length grouping."""
    steps, speed = args.padding_steps, {"config": "finetune_minilm_mixed.json", "steps": args.padding_steps}
    for group in (0, 16):
        run_dir = os.path.join(args.output_dir, f"speed-group{group}")
        metrics = finetune("finetune_minilm_mixed.json", args.data_dir, run_dir, [
            f"data.group_by_length={group}", f"train.total_steps={steps}", f"train.steps_per_block={steps // 2}",
            "data.max_dev_examples=64"])
        speed[f"examples_per_second_{group}"] = metrics["examples_per_second"]
    speed["ratio"] = speed["examples_per_second_16"] / speed["examples_per_second_0"]
    return speed


def main(argv=None) -> int:
    parser = bench_parser("multitask", __doc__)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=[*ROWS, "padding"],
                        help="Which rows to run (default: all but padding).")
    parser.add_argument("--padding_steps", type=int, default=120, help="Training steps of each padding run.")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir, default={})
    for key in args.rows:
        print(f"== benchmark row: {key}", flush=True)
        results.setdefault("rows", {})[key] = padding(args) if key == "padding" else run_row(key, args)
        save_results(args.output_dir, results, "benchmarks.multitask", TITLE)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
