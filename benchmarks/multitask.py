"""Multitask fine-tuning benchmark: an ablation table in the manner of the reference study, a row
a fine-tuning run from MiniLM on the full task files (its config in pipelines/configs/), scored on
the dev sets; docs/benchmarks.md sets the rows beside the reference study's.

    python -m benchmarks.multitask --output_dir runs/bench-multitask [--rows ...]
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


def main(argv=None) -> int:
    parser = bench_parser("multitask", __doc__)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS),
                        help="Which rows to run (default: all).")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir)
    for key in args.rows:
        print(f"== benchmark row: {key}", flush=True)
        (title, config_file), start = ROWS[key], time.perf_counter()
        metrics = run_finetuning(load_config(FinetuneConfig, os.path.join("pipelines", "configs", config_file)),
                                 args.data_dir, os.path.join(args.output_dir, key), minilm_checkpoint())
        results.setdefault("rows", {})[key] = {**metrics, "title": title, "config": config_file,
                                               "wall_seconds": time.perf_counter() - start}
        save_results(args.output_dir, results, "benchmarks.multitask", TITLE)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
