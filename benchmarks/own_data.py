"""Tasks declared on files of a user's kind, trained from the config alone on MiniLM: STS-B cut
into low / middle / high (pair_classes, JSON Lines) and SST-5 as a CSV of class names; exported,
served, asked for their classes. Writes data/, config.json, run/, export/, results.json/.md.

    python -m benchmarks.own_data --data_dir ../shared/data --output_dir runs/bench-own-data
"""

import csv
import json
import os

from benchmarks.results import bench_parser, load_results, save_results, timestamp

TITLE = "Your own data: tasks declared in a config"  # of results.md
SENTIMENT = ("very negative", "negative", "neutral", "positive", "very positive")
SIMILARITY = ("low", "middle", "high")  # STS-B's 0-5 score in thirds


def write_task_files(data_dir: str, folder: str) -> None:
    """The shared SST-5 and STS-B files rewritten as a user's: a CSV, JSON Lines."""
    from kerasbert.data.task_files import read_task_file

    os.makedirs(folder, exist_ok=True)
    for split in ("train", "dev"):
        sst = read_task_file("sst", os.path.join(data_dir, "cs224n", f"sst-{split}.tsv")).examples
        with open(os.path.join(folder, f"sst5-{split}.csv"), "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([["review", "sentiment"]] + [[e.text_a, SENTIMENT[int(e.label)]] for e in sst])
        sts = read_task_file("sts", os.path.join(data_dir, "cs224n", f"sts-{split}.tsv")).examples
        with open(os.path.join(folder, f"sts3-{split}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"sentence1": e.text_a, "sentence2": e.text_b,
                                     "similarity": SIMILARITY[min(int(e.label / (5 / 3)), 2)]}) + "\n" for e in sts)


def user_config(folder: str, steps: int) -> dict:
    """What a user writes: two declared tasks and the demo's training settings."""
    return {"tasks": {
            "sst5": {"kind": "classes", "train_file": os.path.join(folder, "sst5-train.csv"),
                     "dev_file": os.path.join(folder, "sst5-dev.csv"), "text": "review", "label": "sentiment",
                     "class_names": list(SENTIMENT)},
            "sts3": {"kind": "pair_classes", "train_file": os.path.join(folder, "sts3-train.jsonl"),
                     "dev_file": os.path.join(folder, "sts3-dev.jsonl"), "text_a": "sentence1",
                     "text_b": "sentence2", "label": "similarity"}},
        "data": {"max_sequence_length": 64, "max_dev_examples": 300}, "schedule": {"sampling": "round_robin"},
        "train": {"batch_size": 16, "total_steps": steps, "steps_per_block": steps // 3, "learning_rate": 8e-05}}


def served_classes(export_base: str, version: int, dev: dict, count: int) -> dict:
    """{task: {classes :classify answers with, share of `count` dev rows whose best is Keras'}}."""
    import urllib.request

    from serving.process import LocalServer

    answers = {}
    with LocalServer("own-data", export_base) as server:
        server.wait_for_version(version)
        for task, (examples, expected) in dev.items():
            rows = [{"text": e.text_a} if not e.text_b else {"text_a": e.text_a, "text_b": e.text_b}
                    for e in examples[:count]]
            request = json.dumps({"signature_name": f"{task}_classify", "examples": rows}).encode()
            url = f"http://127.0.0.1:{server.rest_port}/v1/models/own-data:classify"
            results = json.loads(urllib.request.urlopen(urllib.request.Request(url, request), timeout=120).read())
            best = [max(range(len(row)), key=lambda i: row[i][1]) for row in results["results"]]
            answers[task] = {"classes": [name for name, _ in results["results"][0]],
                             "agree_with_keras": sum(b == e for b, e in zip(best, expected[:count])) / len(best)}
    return answers


def main(argv=None) -> int:
    parser = bench_parser("own_data", __doc__)  # its --output_dir's export/ gains a version a run
    parser.add_argument("--steps", type=int, default=450, help="Training steps (a multiple of 3).")
    parser.add_argument("--served_rows", type=int, default=200, help="Dev rows asked of the server per task.")
    args = parser.parse_args(argv)

    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.data.task_files import read_task_file
    from kerasbert.export import export_saved_model
    from kerasbert.finetuning.evaluation import predict_examples, predicted_classes
    from kerasbert.finetuning.load import load_finetuned
    from kerasbert.finetuning.run import run_finetuning
    from kerasbert.models.encoder import minilm_checkpoint

    folder, config_path = os.path.join(args.output_dir, "data"), os.path.join(args.output_dir, "config.json")
    write_task_files(args.data_dir, folder)
    with open(config_path, "w") as f:
        json.dump(user_config(os.path.abspath(folder), args.steps), f, indent=2)
    run_dir, export_base = os.path.join(args.output_dir, "run"), os.path.join(args.output_dir, "export")
    metrics = run_finetuning(load_config(FinetuneConfig, config_path), args.data_dir, run_dir, minilm_checkpoint(),
                             overwrite=True)
    version = int(os.path.basename(export_saved_model(run_dir, export_base)))

    config, model, preprocessor = load_finetuned(run_dir)
    dev = {task: read_task_file(model.task_specs[task], config.tasks[task].dev_file).examples[:args.served_rows]
           for task in config.tasks}
    dev = {task: (examples, list(predicted_classes(model.task_specs[task], predict_examples(
        model, preprocessor, task, examples)))) for task, examples in dev.items()}
    served = served_classes(export_base, version, dev, args.served_rows)

    results = load_results(args.output_dir)
    results["tasks"] = {task: {"kind": model.task_specs[task].kind, "dev_accuracy": metrics[f"{task}_accuracy"],
                               "dev_examples": metrics["dev_examples"][task], **served[task]}
                        for task in config.tasks}
    results.update(train_steps=metrics["train_steps"], best_step=metrics["best_step"],
                   train_seconds=metrics["train_seconds"], finished=timestamp())
    print(save_results(args.output_dir, results, "benchmarks.own_data", TITLE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
