"""Named entities (CoNLL-2003) and extractive QA (SQuAD) against Hugging Face `transformers`
on the same MiniLM checkpoint, the same examples and the same budget, in one run.

    make bench-tasks      # the configs' full budget
    python -m benchmarks.tasks --max_steps 200 --train_examples 2000 --dev_examples 300   # a reduced one

Per task (`ner`: finetune_ner.json, `squad`: finetune_squad.json), parts:
    train   one shuffled example list, written in the task's format for `pipelines.finetune`
            and as JSON Lines for the peer (benchmarks/peer_tasks.py in .venv-peer), with the
            shared settings; both train in the config's blocks and score dev after each with
            kerasbert's scorers (`<task>_blocks.png`); kerasbert exports to export/<task>/<N>.
            Killed, both resume from their last finished block.
    speed   raw text to entities / answers over the dev rows: the newest export's signature
            against the peer's pipeline; the export served by `python -m serving` must answer
            over REST and gRPC as in process.
docs/benchmarks.md tells the rest. A finished part is kept when the command runs again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys

from benchmarks.peer_protocol import load_examples, save_examples, time_batches
from benchmarks.peers import run_peer
from benchmarks.results import bench_parser, load_results, save_results, timestamp
from kerasbert.families.conll import read_conll, write_conll
from kerasbert.families.squad import f1_gap_interval, read_squad, write_squad

TASKS = ("ner", "squad")
PARTS = ("train", "speed")
SIGNATURES = {"ner": "entities", "squad": "answer"}
TITLE = "NER and SQuAD: kerasbert against transformers (PyTorch), same checkpoint, examples and budget"


def config_of(args, task: str):
    """The task's config (finetune_<task>.json of --config_dir) at the benchmark's budget: its
    steps and blocks, or --max_steps in one block; --seed for both sides' example order and heads."""
    from kerasbert.config import FinetuneConfig, load_config

    overrides = [f"tasks={task}"] + ([f"train.total_steps={args.max_steps}",
                                      f"train.steps_per_block={args.max_steps}"] if args.max_steps else [])
    overrides += [f"train.seed={args.seed}"] if args.seed is not None else []
    overrides += [f"train.batch_size={args.train_batch_size}"] if getattr(args, "train_batch_size", 0) else []
    return load_config(FinetuneConfig, os.path.join(args.config_dir, f"finetune_{task}.json"), overrides)


def read_examples(task_spec, path: str) -> list:
    return read_conll(path).sentences if task_spec.kind == "tags" else read_squad(path).examples


def as_row(example) -> dict:
    """An example as the peer reads it (benchmarks/peer_protocol.py)."""
    if hasattr(example, "words"):
        return {"words": example.words, "tags": example.tags}
    return {"id": example.uid, "question": example.question, "context": example.context,
            "answers": [{"text": a.text, "start": a.start} for a in example.answers]}


def prepare(args, task: str) -> tuple[str, dict]:
    """Writes inputs/<task>/: the example lists, kerasbert's config, the peer's settings."""
    from kerasbert.config import save_config

    config = config_of(args, task)
    spec = config.tasks[task]
    folder = os.path.join(args.output_dir, "inputs", task)
    os.makedirs(folder, exist_ok=True)
    train = read_examples(spec, os.path.join(args.data_dir, spec.train_file))
    random.Random(config.train.seed).shuffle(train)
    train = train[:args.train_examples or config.data.max_train_examples or None]
    dev = read_examples(spec, os.path.join(args.data_dir, spec.dev_file))
    dev = dev[:args.dev_examples or config.data.max_dev_examples or None]
    files, rows = {}, {"train": [as_row(e) for e in train], "dev": [as_row(e) for e in dev]}
    for split, examples in (("train", train), ("dev", dev)):  # the same examples for both sides
        save_examples(os.path.join(folder, f"{split}.jsonl"), rows[split])
        files[split] = os.path.abspath(os.path.join(folder, split + (".txt" if spec.kind == "tags" else ".json")))
        if spec.kind == "tags":
            write_conll(files[split], examples)
        else:
            write_squad(files[split], examples, title="bench-tasks")
    config = dataclasses.replace(config, data=dataclasses.replace(  # the files hold the examples: no more cuts
        config.data, train_files={task: files["train"]}, dev_files={task: files["dev"]}, max_train_examples=0,
        max_dev_examples=0))
    save_config(config, os.path.join(folder, "config.json"))
    settings = peer_settings(config, spec, rows["train"], rows["dev"])
    with open(os.path.join(folder, "settings.json"), "w") as f:
        json.dump(settings, f, indent=2)
    return folder, settings


def peer_settings(config, spec, train: list[dict], dev: list[dict]) -> dict:
    """The peer's settings.json of `spec` under `config`: the same length, batches and optimiser."""
    from kerasbert.families.conll import Sentence, tag_names

    train_config = config.train
    settings = {"kind": spec.kind,
                "sequence_length": spec.family.sequence_length(spec, config.data.max_sequence_length),
                "batch_size": train_config.batch_size, "total_steps": train_config.total_steps,
                "steps_per_block": train_config.steps_per_block,
                "group_by_length": config.data.group_by_length,
                "learning_rate": train_config.learning_rate,
                "warmup_steps": int(train_config.warmup_fraction * train_config.total_steps),
                "weight_decay": train_config.weight_decay, "clipnorm": train_config.clipnorm,
                "clip_scope": train_config.clip_scope, "epsilon": 1e-6,
                "seed": train_config.seed, "train_examples": len(train), "dev_examples": len(dev)}
    if spec.kind == "tags":
        settings["tag_names"] = list(spec.labels or tag_names([Sentence(r["words"], r["tags"], 0) for r in train]))
    elif spec.kind == "span":
        settings.update(doc_stride=spec.family.doc_stride_at(spec, settings["sequence_length"]),
                        max_query_length=spec.settings.max_query_length,
                        max_answer_length=spec.settings.max_answer_length)
    else:
        settings["class_names"] = list(spec.served_names)
    return settings


def run(command: list[str]) -> None:
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True)


def dev_scores(task: str, dev: list[dict], predictions) -> dict:
    """Predictions (tags per word; {id: answer}) through kerasbert's scorers, as fractions
    (metrics.json's)."""
    from kerasbert.families.conlleval import entity_scores
    from kerasbert.families.squad import squad_scores

    if task == "ner":
        scores = entity_scores([row["tags"] for row in dev], predictions)
        return {"ner_f1": scores.f1, "ner_precision": scores.precision, "ner_recall": scores.recall}
    scores = squad_scores(predictions, {row["id"]: [a["text"] for a in row["answers"]] for row in dev})
    return {"squad_f1": scores["squad_f1"] / 100, "squad_exact_match": scores["squad_exact_match"] / 100}


def kerasbert_blocks(run_dir: str, task: str) -> list[dict]:
    """Each block's dev scores (`<task>_*`) and training examples/s, from the run's history.csv."""
    import csv

    with open(os.path.join(run_dir, "history.csv")) as f:
        rows = list(csv.DictReader(f))
    return [{"block": int(row["epoch"]) + 1, "examples_per_second": float(row["examples_per_second"]),
             **{key[len("dev_"):]: float(value) for key, value in row.items() if key.startswith(f"dev_{task}_")}}
            for row in rows]


def run_predictions(run_dir: str, task: str) -> dict[str, str]:
    """{id: answer} the kerasbert run wrote for a span task's dev questions (its kept block's)."""
    import csv

    with open(os.path.join(run_dir, "predictions", f"{task}-dev.tsv"), newline="", encoding="utf-8") as f:
        return {row["id"]: row["prediction"] for row in csv.DictReader(f, delimiter="\t")}


def part_train(args, task: str, results: dict) -> None:
    """Both sides trained in blocks (each resumes from its last finished block when the
    command runs again), scored on dev after every block; the headline is the last block's."""
    from benchmarks.serving import newest_version
    from kerasbert.models.encoder import minilm_checkpoint

    folder, settings = prepare(args, task)
    run_dir = os.path.join(args.output_dir, "kerasbert", task)
    run([sys.executable, "-m", "pipelines.finetune", "--config", os.path.join(folder, "config.json"),
         "--data_dir", args.data_dir, "--output_dir", run_dir])
    with open(os.path.join(run_dir, "metrics.json")) as f:
        metrics = json.load(f)
    export_base = os.path.join(args.output_dir, "export", task)
    run([sys.executable, "-m", "pipelines.export", "--model_dir", run_dir, "--export_base", export_base])
    peer = run_peer(args.peer_python, "train", ["--inputs", folder, "--checkpoint", minilm_checkpoint(),
                                                "--model_dir", os.path.join(args.output_dir, "peer", task)],
                    os.path.join(args.output_dir, "peer", f"{task}-train.json"), module="benchmarks.peer_tasks")
    dev = load_examples(os.path.join(folder, "dev.jsonl"))
    ours = kerasbert_blocks(run_dir, task)
    theirs = [{"block": block, "examples_per_second": rate, **dev_scores(task, dev, predictions)}
              for block, (predictions, rate) in enumerate(zip(peer["block_predictions"], peer["block_rates"]), 1)]
    summary = {"kerasbert": ours, "transformers": theirs}
    results.setdefault(task, {})["train"] = {
        "settings": settings, "export": newest_version(export_base), "export_step": metrics["best_step"],
        **{side: {**blocks[-1], "examples_per_second": statistics.median(b["examples_per_second"] for b in blocks)}
           for side, blocks in summary.items()},
        "blocks": summary, "peer_versions": peer["versions"], "finished": timestamp()}
    if task == "squad" and metrics["best_step"] == settings["total_steps"]:  # the kept block is the last
        questions = read_squad(os.path.join(folder, "dev.json")).examples
        results[task]["train"]["f1_gap"] = f1_gap_interval(questions, run_predictions(run_dir, task), peer["predictions"])
    plot_blocks(results[task]["train"], task, os.path.join(args.output_dir, f"{task}_blocks.png"))


def plot_blocks(train: dict, task: str, path: str) -> None:
    """Dev headline and training examples/s after each block, both sides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    headline = f"{task}_f1"
    per_block = train["settings"]["steps_per_block"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for side, colour in (("kerasbert", "tab:blue"), ("transformers", "tab:orange")):
        blocks = train["blocks"][side]
        steps = [per_block * b["block"] for b in blocks]  # a block killed while being scored has no row
        axes[0].plot(steps, [100 * b[headline] for b in blocks], "o-", color=colour, label=side)
        axes[1].plot(steps, [b["examples_per_second"] for b in blocks], "o-", color=colour, label=side)
    axes[0].set(xlabel="step", ylabel=f"dev {headline} (%)", title=f"{task}: dev score after each block")
    axes[1].set(xlabel="step", ylabel="examples/s", title="training examples/s of each block")
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def part_speed(args, task: str, results: dict) -> None:
    """answers/s of the newest export's signature (this process: TensorFlow only runs it) and the peer's."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    from benchmarks.serving import newest_version

    if "train" not in results.get(task, {}):
        raise SystemExit(f"bench-tasks: run --parts train for {task} first (speed measures its export)")
    export = newest_version(os.path.join(args.output_dir, "export", task))
    folder = os.path.join(args.output_dir, "inputs", task)
    dev = load_examples(os.path.join(folder, "dev.jsonl"))
    signature = tf.saved_model.load(export).signatures[SIGNATURES[task]]
    outputs = []

    def call(rows):
        return signature(**{name: tf.constant(values) for name, values in inputs_of(task, rows).items()})

    for begin in range(0, len(dev), args.batch_size):
        outputs.append({name: value.numpy() for name, value in call(dev[begin:begin + args.batch_size]).items()})
    ours = time_batches(call, dev, args.batch_size, args.repeats)
    served = served_rows(args, task, export, dev, outputs)
    peer = run_peer(args.peer_python, "pipeline", ["--inputs", folder, "--batch_size", str(args.batch_size),
                                                   "--repeats", str(args.repeats),
                                                   "--model_dir", os.path.join(args.output_dir, "peer", task)],
                    os.path.join(args.output_dir, "peer", f"{task}-pipeline.json"), module="benchmarks.peer_tasks")
    rates = {"kerasbert": statistics.median(ours), "transformers": statistics.median(peer["answers_per_second"])}
    results[task]["speed"] = {"export": export, "answers_per_second": rates, "ratio": rates["kerasbert"] / rates["transformers"],
                              "all": {"kerasbert": ours, "transformers": peer["answers_per_second"]},
                              "batch_size": args.batch_size, "rows": len(dev),
                              "export_scores": dev_scores(task, dev, export_predictions(task, dev, outputs)),
                              "served_equal": served,
                              "finished": timestamp()}


def inputs_of(task: str, rows: list[dict]) -> dict[str, list[str]]:
    if task == "ner":
        return {"text": [" ".join(row["words"]) for row in rows]}
    return {"question": [row["question"] for row in rows], "context": [row["context"] for row in rows]}


def served_rows(args, task: str, export: str, dev: list[dict], outputs: list[dict]) -> dict:
    """The export served by `python -m serving`: the dev rows sent over REST and gRPC in the
    same batches; the share of rows whose every output equals the SavedModel's in process
    (strings and offsets exactly, scores to 1e-5)."""
    from serving.client import ServingClient
    from serving.process import LocalServer

    equal = {"rest": 0, "grpc": 0}
    log = os.path.join(args.output_dir, f"server-{task}.log")
    # A batch of 32 questions at 384 tokens may take minutes on a busy 2-core machine.
    with LocalServer(task, os.path.dirname(export), log_path=log, extra_flags=["--rest_api_timeout_in_ms=600000"]) \
            as server:
        server.wait_for_version(int(os.path.basename(export)))
        for protocol in equal:
            client = ServingClient(task, rest_port=server.rest_port, grpc_port=server.grpc_port, protocol=protocol,
                                   timeout=300)
            for begin, expected in zip(range(0, len(dev), args.batch_size), outputs):
                got = client.predict(SIGNATURES[task], inputs_of(task, dev[begin:begin + args.batch_size]))
                for row in range(len(expected[next(iter(expected))])):
                    equal[protocol] += all(same(got[name][row], value[row]) for name, value in expected.items())
    return {protocol: count / len(dev) for protocol, count in equal.items()}


def same(got, expected) -> bool:
    """A served output (JSON values; gRPC's strings as bytes) equals the one in process."""
    import numpy as np

    expected = np.asarray(expected)
    if expected.dtype.kind == "f":
        return bool(np.allclose(np.asarray(got, np.float64), expected, atol=1e-5))
    if expected.dtype.kind in "OSU":  # a row's single string is a NumPy bytes scalar
        text = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v, otypes=[object])
        return bool(np.array_equal(text(np.asarray(got, dtype=object)), text(expected)))
    return bool(np.array_equal(np.asarray(got), expected))


def export_predictions(task: str, dev: list[dict], outputs: list):
    """The export's dev outputs as predictions: tags per word (an untagged word "O"), {id: answer}."""
    if task == "ner":
        rows = (row for out in outputs for row in out["word_tag"])
        return [[t.decode() or "O" for t in row[:len(example["words"])]] for example, row in zip(dev, rows)]
    answers = (a.decode("utf-8") for out in outputs for a in out["answer"])
    return {row["id"]: answer for row, answer in zip(dev, answers)}


def part_command(args, part: str, task: str) -> list[str]:
    """This command for one part and task (argparse keeps a flag's last value)."""
    return [sys.executable, "-m", "benchmarks.tasks", *args.argv, "--parts", part, "--tasks", task]


def main(argv=None) -> int:
    parser = bench_parser("tasks", __doc__, peer_python=True)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--config_dir", default="pipelines/configs", help="Folder of finetune_ner.json and "
                        "finetune_squad.json.")
    parser.add_argument("--max_steps", type=int, default=0, help="Training steps (0: the config's total_steps).")
    parser.add_argument("--train_examples", type=int, default=0, help="Training examples (0: all).")
    parser.add_argument("--dev_examples", type=int, default=0, help="Dev examples scored and timed (0: all).")
    parser.add_argument("--seed", type=int, default=None, help="Training seed of both sides: the examples' "
                        "order and the new heads (default: the config's). Use its own --output_dir.")
    parser.add_argument("--batch_size", type=int, default=32, help="Rows per inference call.")
    parser.add_argument("--repeats", type=int, default=1, help="Timed passes over the dev rows.")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if len(args.parts) * len(args.tasks) > 1:  # each (part, task) in a process of its own
        for task in args.tasks:
            for part in args.parts:
                subprocess.run(part_command(args, part, task), check=True)
        results = load_results(args.output_dir, default={})
        print(save_results(args.output_dir, results, "benchmarks.tasks", TITLE))  # this command's line
        return 0
    part, task = args.parts[0], args.tasks[0]
    print(f"== bench-tasks: {part} {task}", flush=True)
    results = load_results(args.output_dir, default={})
    {"train": part_train, "speed": part_speed}[part](args, task, results)
    save_results(args.output_dir, results, "benchmarks.tasks", TITLE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
