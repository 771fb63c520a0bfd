"""What `data.group_by_length` buys: `finetune_minilm_mixed.json` trained for --steps steps
with group_by_length 0 and 16 (dev sets cut to 64 examples); examples/s is the median block's,
training steps alone. A few minutes; run it alone.

    python -m benchmarks.padding --output_dir runs/bench-padding [--steps 120]
"""

from __future__ import annotations

import os
import sys

TITLE = "Length grouping benchmark"  # of results.md
GROUPS = (0, 16)


def training_speed(data_dir: str, output_dir: str, steps: int) -> dict:
    from kerasbert.models.encoder import minilm_checkpoint

    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.finetuning.run import run_finetuning

    speed = {"config": "finetune_minilm_mixed.json", "steps": steps}
    for group in GROUPS:
        config = load_config(FinetuneConfig, os.path.join("pipelines", "configs", "finetune_minilm_mixed.json"),
                             [f"data.group_by_length={group}", f"train.total_steps={steps}",
                              f"train.steps_per_block={steps // 2}", "data.max_dev_examples=64"])
        metrics = run_finetuning(config, data_dir, os.path.join(output_dir, f"speed-group{group}"),
                                 minilm_checkpoint())
        speed[f"examples_per_second_{group}"] = metrics["examples_per_second"]
    speed["ratio"] = speed[f"examples_per_second_{GROUPS[1]}"] / speed[f"examples_per_second_{GROUPS[0]}"]
    return speed


def main(argv=None) -> int:
    from benchmarks.results import bench_parser, save_results

    parser = bench_parser("padding", __doc__)
    parser.add_argument("--steps", type=int, default=120, help="Training steps per run.")
    args = parser.parse_args(argv)
    results = {"speed": training_speed(args.data_dir, args.output_dir, args.steps)}
    print(save_results(args.output_dir, results, "benchmarks.padding", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
