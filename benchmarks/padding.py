"""What `data.group_by_length` buys: less padding, more examples per second.

    python -m benchmarks.padding --output_dir runs/bench-padding [--parts fill speed dev]

fill   the share of real tokens (padding mask) in 100 training batches of 32 per task and
       encoder, on the full task files with the MiniLM tokenizer, without grouping and with
       runs of 16 batches sorted by length. Tokenization only; takes seconds.
speed  `finetune_minilm_mixed.json` trained for --steps steps with group_by_length 0 and 16
       (dev sets cut to 64 examples); examples per second is the median over blocks of the
       training steps alone (see `Throughput`). Takes a few minutes; run it alone.
dev    seconds to score the three dev sets (batches of 64) with the mixed config's heads on
       MiniLM, batched in file order and sorted by length (`predict_examples`, what dev
       scoring does); median of --repeats after one untimed pass each. Run it alone.
Writes results.json and results.md under --output_dir.
"""

from __future__ import annotations

import argparse
import os
import sys

TITLE = "Length grouping benchmark"  # of results.md
GROUPS = (0, 16)
BATCHES = 100


def token_fill(data_dir: str, batch_size: int = 32) -> list[dict]:
    from kerasbert.models.encoder import minilm_checkpoint

    from kerasbert.config import FinetuneDataConfig
    from kerasbert.finetuning.data import TaskPreprocessor, load_examples, resolve_path, task_dataset
    from kerasbert.tasks import BUILTIN_TASKS
    from kerasbert.tokenization import load_tokenizer

    tokenizer = load_tokenizer(minilm_checkpoint())
    data_config = FinetuneDataConfig(max_sequence_length=64)
    rows = []
    for encoder, tasks in (("cross", ("sst", "para", "sts")), ("bi", ("para", "sts"))):
        preprocessor = TaskPreprocessor(tokenizer, data_config.max_sequence_length, encoder)
        for task in tasks:
            examples = load_examples(task, resolve_path(data_dir, BUILTIN_TASKS[task].train_file))
            row = {"encoder": encoder, "task": task}
            for group in GROUPS:
                real = computed = 0
                batches = task_dataset(task, examples, preprocessor, batch_size, True, 0, group)
                for features, _ in batches.take(BATCHES).as_numpy_iterator():
                    for key in ("padding_mask", "padding_mask_b"):
                        # Cross-encoder batches carry padding_mask_b too, all zeros: not a sequence.
                        if key in features and features[key].any():
                            real += int(features[key].sum())
                            computed += features[key].size
                row[f"fill_{group}"] = real / computed
                row[f"tokens_per_batch_{group}"] = computed / BATCHES
            rows.append(row)
            print(row, flush=True)
    return rows


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


def dev_scoring(data_dir: str, repeats: int) -> dict:
    import time

    import numpy as np
    from kerasbert.models.encoder import minilm_checkpoint

    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.finetuning.data import TaskPreprocessor, load_examples, resolve_path, task_dataset
    from kerasbert.finetuning.evaluation import predict_examples, predict_task
    from kerasbert.finetuning.model import MultitaskBert
    from kerasbert.models.encoder import load_encoder
    from kerasbert.tokenization import load_tokenizer

    config = load_config(FinetuneConfig, os.path.join("pipelines", "configs", "finetune_minilm_mixed.json"))
    heads, init = config.heads, minilm_checkpoint()
    preprocessor = TaskPreprocessor(load_tokenizer(init), config.data.max_sequence_length,
                                    heads.pair_encoder, sts_encoder=heads.sts_encoder)
    model = MultitaskBert(load_encoder(init), pair_encoder=heads.pair_encoder, sts_encoder=heads.sts_encoder,
                          pooling=heads.pooling, tasks=config.tasks)
    dev = {task: load_examples(task, resolve_path(data_dir, config.tasks[task].dev_file)) for task in config.tasks}
    orders = {
        "file_order": lambda task: predict_task(model, task, task_dataset(task, dev[task], preprocessor, 64, False)),
        "by_length": lambda task: predict_examples(model, preprocessor, task, dev[task], 64),
    }
    seconds, predictions = {name: [] for name in orders}, {}
    for repeat in range(repeats + 1):
        for name, predict in orders.items():
            start = time.perf_counter()
            predictions[name] = {task: predict(task) for task in config.tasks}
            if repeat:  # the first pass traces
                seconds[name].append(time.perf_counter() - start)
            print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    result = {"examples": sum(len(e) for e in dev.values()), "repeats": repeats,
              "max_abs_difference": max(float(np.abs(predictions["file_order"][t] - predictions["by_length"][t]).max())
                                        for t in config.tasks)}
    for name in orders:
        result[f"seconds_{name}"] = float(np.median(seconds[name]))
    result["ratio"] = result["seconds_file_order"] / result["seconds_by_length"]
    return result


def main(argv=None) -> int:
    from benchmarks.results import load_results, render_markdown, save_results
    from kerasbert.data.corpus import default_data_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.padding", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    parser.add_argument("--output_dir", default="runs/bench-padding", help="Results folder.")
    parser.add_argument("--parts", nargs="+", default=["fill", "speed", "dev"], choices=["fill", "speed", "dev"])
    parser.add_argument("--steps", type=int, default=120, help="Training steps per speed run.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed passes per order in the dev part.")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir, default={})
    if "fill" in args.parts:
        results["fill"] = token_fill(args.data_dir)
        save_results(args.output_dir, results, "benchmarks.padding", TITLE)
    if "speed" in args.parts:
        results["speed"] = training_speed(args.data_dir, args.output_dir, args.steps)
        save_results(args.output_dir, results, "benchmarks.padding", TITLE)
    if "dev" in args.parts:
        results["dev"] = dev_scoring(args.data_dir, args.repeats)
        save_results(args.output_dir, results, "benchmarks.padding", TITLE)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
