"""Multitask fine-tuning benchmark: an ablation table in the manner of the reference study.

    python -m benchmarks.multitask --output_dir runs/bench-multitask [--rows ...]

Rows (each a full fine-tuning run on the full task files, scored on the dev sets):
    minilm_bi      MiniLM, bi-encoder (Sentence-BERT) pair heads   finetune_minilm_bi.json
    minilm_cross   MiniLM, cross-encoder pair heads                finetune_minilm_cross.json
    minilm_mixed   MiniLM, cross-encoder paraphrase, bi-encoder (cosine) similarity with its
                   loss weighted x10, 1,800 proportionally sampled steps at lr 1e-4
                                                                  finetune_minilm_mixed.json
    continued_cross  MiniLM after continued MLM on the task sentences (the `continue` part of
                   benchmarks.pretrain), then minilm_cross's fine-tuning
    scratch_cross  the mini encoder pretrained from scratch by benchmarks.pretrain, cross
                   heads, 1,500 steps at a small model's learning rate  finetune_scratch_mini.json
Every row sorts runs of 16 training batches by length (`data.group_by_length`), which cuts
padding. The reference study's rows are quoted for comparison. Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.results import load_results, render_markdown, save_results

TITLE = "Multitask fine-tuning benchmark (dev sets)"  # of results.md
ROWS = {
    "minilm_bi": ("MiniLM, multitask, bi-encoder pair heads", "finetune_minilm_bi.json", "minilm"),
    "minilm_cross": ("MiniLM, multitask, cross-encoder pair heads", "finetune_minilm_cross.json", "minilm"),
    "minilm_mixed": ("MiniLM, multitask, cross-encoder paraphrase + bi-encoder similarity",
                     "finetune_minilm_mixed.json", "minilm"),
    "continued_cross": ("MiniLM + continued MLM on task text, then cross-encoder multitask",
                        "finetune_minilm_cross.json", "runs/bench-pretrain/continue"),
    "scratch_cross": ("mini BERT pretrained from scratch here, cross-encoder multitask",
                      "finetune_scratch_mini.json", "runs/bench-pretrain/scratch"),
}


def run_row(key: str, data_dir: str, output_dir: str) -> dict:
    from kerasbert.models.encoder import minilm_checkpoint

    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.finetuning.run import run_finetuning

    title, config_file, init = ROWS[key]
    init = minilm_checkpoint() if init == "minilm" else init
    if not os.path.isdir(init):
        raise FileNotFoundError(f"{init}: run `python -m benchmarks.pretrain` first (row {key})")
    config = load_config(FinetuneConfig, os.path.join("pipelines", "configs", config_file))
    start = time.perf_counter()
    metrics = run_finetuning(config, data_dir, os.path.join(output_dir, key), init)
    return {**metrics, "title": title, "config": config_file, "wall_seconds": time.perf_counter() - start}


def main(argv=None) -> int:
    from kerasbert.data.corpus import default_data_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.multitask", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    parser.add_argument("--output_dir", default="runs/bench-multitask", help="Results folder.")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS),
                        help="Which experiments to run (default: all).")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir, default={"rows": {}})
    for key in args.rows:
        print(f"== benchmark row: {key}", flush=True)
        results["rows"][key] = run_row(key, args.data_dir, args.output_dir)
        save_results(args.output_dir, results, "benchmarks.multitask", TITLE)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
