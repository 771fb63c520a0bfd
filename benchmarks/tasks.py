"""kerasbert against Hugging Face `transformers` (benchmarks/peer_torch.py, in .venv-peer) on the same
MiniLM checkpoint, examples and budget; docs/benchmarks.md tells what is measured and the figures.

    make bench-tasks          # train, speed: NER and SQuAD at the configs' full budget
    python -m benchmarks.tasks --max_steps 200 --train_examples 2000 --dev_examples 300   # a reduced one
    make bench-transformers   # in, out (--tasks sst ner squad): the transformers bridge

Tasks: ner (finetune_ner.json), squad (finetune_squad.json), sst (in only). Parts, each task's in a
process of its own; what a part finished is kept when the command runs again:
    train   both sides fine-tune on one shuffled example list with the same settings, in blocks,
            scoring dev after each with kerasbert's scorers; kerasbert exports to export/<task>/<N>
    speed   raw text to entities / answers: the newest export's signature against the peer's
            pipeline; the export served must answer over REST and gRPC as in process
    in      transformers fine-tunes (STEPS); kerasbert imports, exports and serves its folder
            against transformers on it (the peer's `outputs`) and its pipeline
    out     the imported runs fine-tuned further by kerasbert (--continue_steps), exported both ways:
            transformers on the folder against the server
"""

import argparse
import csv
import dataclasses
import os
import random
import subprocess
import sys
import time
from typing import Callable

import numpy as np

from benchmarks.peer_protocol import load_examples, read_json, save_examples, time_batches, write_json
from benchmarks.results import (bench_parser, compared, load_results, peer_training, plot_panels, run_peer,
                                save_results, timestamp)
from benchmarks.serving import newest_version
from kerasbert.config import FinetuneConfig, load_config, save_config
from kerasbert.data.task_files import read_task_file, read_training_file
from kerasbert.families.tagging.conll import Sentence, read_conll, tag_names, write_conll
from kerasbert.families.tagging.conlleval import entity_scores
from kerasbert.families.span_qa.squad import f1_gap_interval, read_squad, squad_scores, write_squad
from kerasbert.models.encoder import minilm_checkpoint
from serving.client import ServingClient
from serving.process import LocalServer

TASKS = ("sst", "ner", "squad")
SIGNATURES = {"sst": "classifier", "ner": "entities", "squad": "answer"}  # imported heads take these names
TITLES = {"train": "NER and SQuAD: kerasbert against transformers (PyTorch), same checkpoint, examples and budget",
          "in": "The transformers bridge: kerasbert served against transformers on the same checkpoints"}
SST = ["data.max_sequence_length=128", "train.learning_rate=1e-4", "train.warmup_fraction=0.1"]  # no config file
STEPS = {"sst": 60, "ner": 60, "squad": 24}  # the peer's in the in part (0 --max_steps)
GOALS = {"sst": 0.995, "ner": 0.99, "squad": 0.99}
PROBABILITY_TOLERANCE = 1e-4
CAUSES = {
    "words": "a word with punctuation: the tasks declare words=\"punctuation\" (BERT's basic tokenizer's "
             "words, as transformers' BertPreTokenizer), so the two should split alike",
    "logits": "a near tie: the two sides' float32 arithmetic differs in rounding (about 1e-6 in probability; "
              "both compute the GELU the checkpoint's hidden_act names)",
    "window": "a context of several windows: kerasbert starts a span only in its first piece's max-context "
              "window (run_squad.py); run_qa.py's postprocessing takes the best span of any window",
}


# --- Inputs of both sides --------------------------------------------------------------

def config_of(args, task: str):
    """The task's config (finetune_<task>.json of --config_dir; sst: SST) at its steps and blocks, or
    --max_steps in one block; --seed for both sides' example order and heads."""
    overrides = [f"tasks={task}"] + ([f"train.total_steps={args.max_steps}",
                                      f"train.steps_per_block={args.max_steps}"] if args.max_steps else [])
    overrides += [f"train.seed={args.seed}"] if args.seed is not None else []
    overrides += [f"train.batch_size={args.train_batch_size}"] if args.train_batch_size else []
    if task == "sst":
        return load_config(FinetuneConfig, None, overrides + SST)
    return load_config(FinetuneConfig, os.path.join(args.config_dir, f"finetune_{task}.json"), overrides)


@dataclasses.dataclass(frozen=True)
class OwnFormat:
    """What the bench does with the files of a family's own format (`family.format`): how it reads
    and writes them, and what the peer needs besides the shared settings."""

    extension: str
    read: Callable  # path -> examples
    write: Callable  # (path, examples) -> None
    peer_settings: Callable  # (spec, settings, train rows) -> the peer's settings of the family


OWN_FORMATS = {
    "conll": OwnFormat(".txt", lambda path: read_conll(path).sentences, write_conll,
                       lambda spec, settings, train: {"tag_names": list(spec.settings.labels or tag_names(
                           [Sentence(r["words"], r["tags"], 0) for r in train]))}),
    "squad": OwnFormat(".json", lambda path: read_squad(path).examples,
                       lambda path, examples: write_squad(path, examples, title="bench-tasks"),
                       lambda spec, settings, train: {
                           "doc_stride": spec.family.doc_stride_at(spec, settings["sequence_length"]),
                           "max_query_length": spec.settings.max_query_length,
                           "max_answer_length": spec.settings.max_answer_length}),
}


def read_examples(spec, path: str) -> tuple:
    """(the task as its training file declares it, the file's examples)."""
    if spec.family.format:
        return spec, OWN_FORMATS[spec.family.format].read(path)
    spec, read = read_training_file(spec, path)
    return spec, read.examples


def as_row(example) -> dict:
    """An example as the peer reads it (benchmarks/peer_protocol.py)."""
    if hasattr(example, "words"):
        return {"words": example.words, "tags": example.tags}
    if hasattr(example, "question"):
        return {"id": example.uid, "question": example.question, "context": example.context,
                "answers": [{"text": a.text, "start": a.start} for a in example.answers]}
    return {"id": example.uid, "text": example.text_a, "label": int(example.label)}


def prepare(args, task: str) -> tuple[str, dict]:
    """Writes inputs/<task>/: the example lists, kerasbert's config and files, the peer's settings."""
    config = config_of(args, task)
    spec, train = read_examples(config.tasks[task], os.path.join(args.data_dir, config.tasks[task].train_file))
    folder = os.path.join(args.output_dir, "inputs", task)
    os.makedirs(folder, exist_ok=True)
    random.Random(config.train.seed).shuffle(train)
    train = train[:args.train_examples or config.data.max_train_examples or None]
    dev = (read_examples(spec, os.path.join(args.data_dir, spec.dev_file))[1] if spec.family.format
           else read_task_file(spec, os.path.join(args.data_dir, spec.dev_file)).examples)
    dev = dev[:args.dev_examples or config.data.max_dev_examples or None]
    rows = {"train": [as_row(e) for e in train], "dev": [as_row(e) for e in dev]}
    for split in rows:  # the same examples for both sides
        save_examples(os.path.join(folder, f"{split}.jsonl"), rows[split])
    if spec.family.format:  # kerasbert trains on them: its files and config
        own = OWN_FORMATS[spec.family.format]
        files = {split: os.path.abspath(os.path.join(folder, split + own.extension)) for split in rows}
        for split, examples in (("train", train), ("dev", dev)):
            own.write(files[split], examples)
        config = dataclasses.replace(config, data=dataclasses.replace(  # the files hold the examples: no more cuts
            config.data, train_files={task: files["train"]}, dev_files={task: files["dev"]}, max_train_examples=0,
            max_dev_examples=0))
        save_config(config, os.path.join(folder, "config.json"))
    settings = peer_settings(config, spec, rows["train"], rows["dev"])
    write_json(os.path.join(folder, "settings.json"), settings)
    return folder, settings


def peer_settings(config, spec, train: list[dict], dev: list[dict]) -> dict:
    """The peer's settings.json of `spec` under `config`: the same length, batches and optimiser."""
    settings = {"kind": spec.kind, "sequence_length": spec.family.sequence_length(spec, config.data.max_sequence_length),
                **peer_training(config.train), "group_by_length": config.data.group_by_length, "seed": config.train.seed,
                "train_examples": len(train), "dev_examples": len(dev)}
    if spec.family.format:
        settings.update(OWN_FORMATS[spec.family.format].peer_settings(spec, settings, train))
    else:
        settings["class_names"] = list(spec.settings.served_names)
    return settings


def inputs_of(task: str, rows: list[dict]) -> dict[str, list[str]]:
    if task == "sst":
        return {"text": [row["text"] for row in rows]}
    if task == "ner":
        return {"text": [" ".join(row["words"]) for row in rows]}
    return {"question": [row["question"] for row in rows], "context": [row["context"] for row in rows]}


# --- Running either side ---------------------------------------------------------------

def run(command: list[str]) -> None:
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True)


def once(path: str, command: list[str]) -> str:
    """Runs `command` unless `path` (what it writes) is there; returns `path`."""
    if not os.path.exists(path):
        run(command)
    return path


def peer(args, command: str, task: str, model_dir: str, name: str, *extra: str, keep: bool = True) -> dict:
    """The peer's `command` on inputs/<task>/ and `model_dir`; its results in peer/<name>.json (with
    `keep`, those of an earlier run if there)."""
    output = os.path.join(args.output_dir, "peer", f"{name}.json")
    if keep and os.path.exists(output):
        return read_json(output)
    return run_peer(args.peer_python, command, ["--inputs", os.path.join(args.output_dir, "inputs", task),
                                                "--model_dir", model_dir, *extra], output)


def batches_of(rows: list, size: int) -> list[list]:
    return [rows[begin:begin + size] for begin in range(0, len(rows), size)]


def by_row(outputs: list[dict], batches: list[list]) -> list[dict]:
    """Each batch's outputs ({name: values}) as one {name: value} a row."""
    return [{name: values[row] for name, values in out.items()} for out, batch in zip(outputs, batches)
            for row in range(len(batch))]


def served(args, task: str, export: str, dev: list[dict], protocols=("rest",)) -> dict:
    """{protocol: (each dev row's outputs, answers/s)} from `python -m serving` on the version folder
    `export`: --batch_size rows a request, after one untimed request."""
    name = f"{task}-{os.path.basename(os.path.dirname(os.path.dirname(export)))}"  # ner-export, ner-export-out
    batches, found = batches_of(dev, args.batch_size), {}
    # A batch of 32 questions at 384 tokens may take minutes on a busy 2-core machine.
    with LocalServer(name, os.path.dirname(export), log_path=os.path.join(args.output_dir, f"server-{name}.log"),
                     extra_flags=["--rest_api_timeout_in_ms=600000"]) as server:
        server.wait_for_version(int(os.path.basename(export)))
        for protocol in protocols:
            client = ServingClient(name, rest_port=server.rest_port, grpc_port=server.grpc_port, protocol=protocol,
                                   timeout=600)
            client.predict(SIGNATURES[task], inputs_of(task, batches[0]))
            started = time.perf_counter()
            answers = [client.predict(SIGNATURES[task], inputs_of(task, batch)) for batch in batches]
            found[protocol] = by_row(answers, batches), len(dev) / (time.perf_counter() - started)
    return found


# --- bench-tasks: train and speed --------------------------------------------------------

def dev_scores(task: str, dev: list[dict], predictions) -> dict:
    """Predictions (tags per word; {id: answer}) through kerasbert's scorers, as fractions
    (metrics.json's)."""
    if task == "ner":
        scores = entity_scores([row["tags"] for row in dev], predictions)
        return {"ner_f1": scores.f1, "ner_precision": scores.precision, "ner_recall": scores.recall}
    scores = squad_scores(predictions, {row["id"]: [a["text"] for a in row["answers"]] for row in dev})
    return {"squad_f1": scores["squad_f1"] / 100, "squad_exact_match": scores["squad_exact_match"] / 100}


def kerasbert_blocks(run_dir: str, task: str) -> list[dict]:
    """Each block's dev scores (`<task>_*`) and training examples/s, from the run's history.csv."""
    with open(os.path.join(run_dir, "history.csv")) as f:
        rows = list(csv.DictReader(f))
    return [{"block": int(row["epoch"]) + 1, "examples_per_second": float(row["examples_per_second"]),
             **{key[len("dev_"):]: float(value) for key, value in row.items() if key.startswith(f"dev_{task}_")}}
            for row in rows]


def part_train(args, task: str, results: dict) -> None:
    """Both sides trained in blocks (each resumes from its last finished block when the
    command runs again), scored on dev after every block; the headline is the last block's."""
    folder, settings = prepare(args, task)
    run_dir = os.path.join(args.output_dir, "kerasbert", task)
    run([sys.executable, "-m", "pipelines.finetune", "--config", os.path.join(folder, "config.json"),
         "--data_dir", args.data_dir, "--output_dir", run_dir])
    metrics = read_json(os.path.join(run_dir, "metrics.json"))
    export_base = os.path.join(args.output_dir, "export", task)
    run([sys.executable, "-m", "pipelines.export", "--model_dir", run_dir, "--export_base", export_base])
    trained = peer(args, "train", task, os.path.join(args.output_dir, "peer", task), f"{task}-train",
                   "--checkpoint", minilm_checkpoint(), keep=False)
    dev = load_examples(os.path.join(folder, "dev.jsonl"))
    theirs = [{"block": block, "examples_per_second": rate, **dev_scores(task, dev, predictions)}
              for block, (predictions, rate) in enumerate(zip(trained["block_predictions"], trained["block_rates"]), 1)]
    blocks = {"kerasbert": kerasbert_blocks(run_dir, task), "transformers": theirs}
    part = results.setdefault(task, {})["train"] = {
        "settings": settings, "export": newest_version(export_base), "export_step": metrics["best_step"],
        **{side: {**rows[-1], "examples_per_second": float(np.median([b["examples_per_second"] for b in rows]))}
           for side, rows in blocks.items()},
        "blocks": blocks, "peer_versions": trained["versions"], "finished": timestamp()}
    if task == "squad" and metrics["best_step"] == settings["total_steps"]:  # the kept block is the last
        with open(os.path.join(run_dir, "predictions", f"{task}-dev.tsv"), newline="", encoding="utf-8") as f:
            ours = {row["id"]: row["prediction"] for row in csv.DictReader(f, delimiter="\t")}  # the kept block's
        part["f1_gap"] = f1_gap_interval(read_squad(os.path.join(folder, "dev.json")).examples, ours,
                                         trained["predictions"])
    # A block killed while being scored has no row: steps from the blocks' numbers.
    steps = {side: [settings["steps_per_block"] * b["block"] for b in rows] for side, rows in blocks.items()}

    def panel(title: str, ylabel: str, value) -> dict:
        return {"title": title, "xlabel": "step", "ylabel": ylabel,
                "lines": [(side, steps[side], [value(b) for b in rows], {}) for side, rows in blocks.items()]}

    plot_panels(os.path.join(args.output_dir, f"{task}_blocks.png"), [
        panel(f"{task}: dev score after each block", f"dev {task}_f1 (%)", lambda b: 100 * b[f"{task}_f1"]),
        panel("training examples/s of each block", "examples/s", lambda b: b["examples_per_second"])])


def part_speed(args, task: str, results: dict) -> None:
    """answers/s of the newest export's signature (this process: TensorFlow only runs it) and the peer's."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    if "train" not in results.get(task, {}):
        raise SystemExit(f"bench-tasks: run --parts train for {task} first (speed measures its export)")
    export = newest_version(os.path.join(args.output_dir, "export", task))
    dev = load_examples(os.path.join(args.output_dir, "inputs", task, "dev.jsonl"))
    signature = tf.saved_model.load(export).signatures[SIGNATURES[task]]

    def call(rows):
        return signature(**{name: tf.constant(values) for name, values in inputs_of(task, rows).items()})

    batches = batches_of(dev, args.batch_size)
    ours = by_row([{name: value.numpy() for name, value in call(batch).items()} for batch in batches], batches)
    rates = time_batches(call, dev, args.batch_size, args.repeats)
    found = served(args, task, export, dev, ("rest", "grpc"))
    theirs = peer(args, "pipeline", task, os.path.join(args.output_dir, "peer", task), f"{task}-pipeline",
                  "--batch_size", str(args.batch_size), "--repeats", str(args.repeats), keep=False)
    results[task]["speed"] = {
        "export": export, **compared("answers_per_second", rates, theirs["answers_per_second"]),
        "batch_size": args.batch_size, "rows": len(dev),
        "export_scores": dev_scores(task, dev, export_predictions(task, dev, ours)),
        # Every output equal to the SavedModel's in process: strings and offsets exactly, scores to 1e-5.
        "served_equal": {protocol: sum(all(same(got[name], want[name]) for name in want)
                                       for got, want in zip(rows, ours)) / len(dev)
                         for protocol, (rows, _) in found.items()},
        "finished": timestamp()}


def same(got, expected) -> bool:
    """A served output (JSON values; gRPC's strings as bytes) equals the one in process."""
    expected = np.asarray(expected)
    if expected.dtype.kind == "f":
        return bool(np.allclose(np.asarray(got, np.float64), expected, atol=1e-5))
    if expected.dtype.kind in "OSU":  # a row's single string is a NumPy bytes scalar
        text = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v, otypes=[object])
        return bool(np.array_equal(text(np.asarray(got, dtype=object)), text(expected)))
    return bool(np.array_equal(np.asarray(got), expected))


def export_predictions(task: str, dev: list[dict], outputs: list[dict]):
    """The export's dev outputs as predictions: tags per word (an untagged word "O"), {id: answer}."""
    if task == "ner":
        return [[t.decode() or "O" for t in out["word_tag"][:len(row["words"])]] for row, out in zip(dev, outputs)]
    return {row["id"]: out["answer"].decode("utf-8") for row, out in zip(dev, outputs)}


# --- bench-transformers: in and out ------------------------------------------------------

def as_peer_row(task: str, row: dict, class_names: list[str]) -> dict:
    """A served row in the peer's form: probabilities by class; [type, start, end, text]; [answer, start, end]."""
    if task == "sst":
        return {"probabilities": dict(zip(class_names, row["probabilities"]))}
    if task == "ner":
        return {"entities": [[row["entity_type"][i], row["entity_start"][i], row["entity_end"][i],
                              row["entity_text"][i]] for i in range(row["num_entities"])]}
    return {"answer": [row["answer"], row["answer_start"], row["answer_end"]]}


def punctuated(text: str, start: int, end: int) -> bool:
    """Whether a str.split() word over text[start:end] holds a character that is not a letter or digit."""
    position = 0
    for word in text.split():
        position = text.index(word, position)
        if position < end and position + len(word) > start and not word.isalnum():
            return True
        position += len(word)
    return False


def agreement(task: str, dev: list[dict], ours: list[dict], theirs: list[dict]) -> dict:
    """Rows equal, the goal, and every row that differs with its likely cause (CAUSES): "words"
    where an entity that differs covers a word with punctuation (ex-England, U.S., O'Brien)."""
    if task == "sst":
        gaps = [max(abs(o["probabilities"][k] - t["probabilities"][k]) for k in t["probabilities"])
                for o, t in zip(ours, theirs)]
        best = [[max(side["probabilities"], key=side["probabilities"].get) for side in pair]
                for pair in zip(ours, theirs)]
        differ = [{"row": i, "text": dev[i]["text"], "kerasbert": o, "transformers": t, "max_difference": gaps[i],
                   "cause": "logits"} for i, (o, t) in enumerate(best) if o != t]
        within = sum(gap <= PROBABILITY_TOLERANCE for gap in gaps) / len(dev)
        return {"rows": len(dev), "equal": 1 - len(differ) / len(dev), "goal": GOALS[task],
                "probabilities_within_1e-4": within, "max_probability_difference": max(gaps),
                "met": 1 - len(differ) / len(dev) >= GOALS[task] and within == 1.0, "differences": differ}
    key = "entities" if task == "ner" else "answer"
    differ = []
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if o[key] == t[key]:
            continue
        if task == "ner":
            text = " ".join(dev[i]["words"])
            changed = [e for e in o[key] + t[key] if (e in o[key]) != (e in t[key])]
            cause = "words" if any(punctuated(text, e[1], e[2]) for e in changed) else "logits"
            differ.append({"row": i, "text": text, "kerasbert": o[key], "transformers": t[key], "cause": cause})
        else:
            differ.append({"row": i, "question": dev[i]["question"], "kerasbert": o[key], "transformers": t[key],
                           "cause": "window" if t.get("windows", 1) > 1 else "logits"})
    share = 1 - len(differ) / len(dev)
    return {"rows": len(dev), "equal": share, "goal": GOALS[task], "met": share >= GOALS[task],
            "equal_but_for_words": 1 - sum(d["cause"] != "words" for d in differ) / len(dev),
            "causes": {c: sum(d["cause"] == c for d in differ) for c in CAUSES if any(d["cause"] == c for d in differ)},
            "differences": differ}


def compare(args, task: str, export: str, hf_folder: str, name: str, settings: dict) -> tuple[dict, float]:
    """Served answers of `export` against transformers' on `hf_folder`; (agreement, served answers/s)."""
    dev = load_examples(os.path.join(args.output_dir, "inputs", task, "dev.jsonl"))
    theirs = peer(args, "outputs", task, hf_folder, f"{name}-outputs", "--batch_size", str(args.batch_size))
    rows, rate = served(args, task, export, dev)["rest"]
    ours = [as_peer_row(task, row, settings.get("class_names", [])) for row in rows]
    return agreement(task, dev, ours, theirs["rows"]), rate


def part_in(args, task: str, results: dict) -> None:
    """transformers fine-tunes, saves; kerasbert imports, exports, serves; both answer the dev rows."""
    folder, settings = prepare(argparse.Namespace(**{**vars(args), "max_steps": args.max_steps or STEPS[task]}), task)
    peer_dir, imported = (os.path.join(args.output_dir, side, task) for side in ("peer", "imported"))
    trained = peer(args, "train", task, peer_dir, f"{task}-train", "--checkpoint", minilm_checkpoint())
    once(imported, [sys.executable, "-m", "pipelines.import_transformers", "--checkpoint", peer_dir, "--output_dir",
                    imported, "--sequence_length",  # ner: 0 (512), as transformers' pipeline
                    "0" if task == "ner" else str(settings["sequence_length"])])
    export = once(os.path.join(args.output_dir, "export", task, "1"), [
        sys.executable, "-m", "pipelines.export", "--model_dir", imported, "--export_base",
        os.path.join(args.output_dir, "export", task)])
    found, rate = compare(args, task, export, peer_dir, task, settings)
    theirs = peer(args, "pipeline", task, peer_dir, f"{task}-pipeline",
                  "--batch_size", str(args.batch_size))["answers_per_second"][0]
    results.setdefault(task, {})["in"] = {
        **found, "speed": {"kerasbert_served_rest": rate, "transformers_pipeline": theirs, "ratio": rate / theirs,
                           "batch_size": args.batch_size},
        "peer_train": {"steps": settings["total_steps"], "batch_size": settings["batch_size"],
                       "train_rows": trained["train_rows"], "examples_per_second": trained["examples_per_second"]},
        "peer_versions": trained["versions"], "finished": timestamp()}


def part_out(args, task: str, results: dict) -> None:
    """kerasbert fine-tunes the imported run further (its heads carry on), exports it both ways;
    transformers on its folder against the server."""
    folder = os.path.join(args.output_dir, "inputs", task)
    settings = read_json(os.path.join(folder, "settings.json"))
    run_dir, steps = os.path.join(args.output_dir, "kerasbert", task), str(args.continue_steps)
    once(os.path.join(run_dir, "metrics.json"), [
        sys.executable, "-m", "pipelines.finetune", "--config", os.path.join(folder, "config.json"), "--data_dir",
        args.data_dir, "--init_checkpoint", os.path.join(args.output_dir, "imported", task), "--output_dir", run_dir,
        "--set", f"train.total_steps={steps}", "--set", f"train.steps_per_block={steps}",
        "--set", f"train.batch_size={settings['batch_size']}", "--set", "train.warmup_fraction=0",
        *(["--set", "data.max_sequence_length=512", "--set", "tasks.ner.words=punctuation"] if task == "ner" else [])])
    hf_base, export_base = (os.path.join(args.output_dir, part, task) for part in ("hf", "export-out"))
    once(os.path.join(hf_base, task), [sys.executable, "-m", "pipelines.export", "--model_dir", run_dir, "--format",
                                       "transformers", "--export_base", hf_base])
    export = once(os.path.join(export_base, "1"), [sys.executable, "-m", "pipelines.export", "--model_dir", run_dir,
                                                   "--export_base", export_base])
    found, _ = compare(args, task, export, os.path.join(hf_base, task), f"{task}-out", settings)
    metrics = read_json(os.path.join(run_dir, "metrics.json"))
    results.setdefault(task, {})["out"] = {
        **found, "kerasbert_steps": args.continue_steps,
        "dev": {key: metrics[key] for key in ("ner_f1", "squad_f1", "squad_exact_match") if key in metrics},
        "finished": timestamp()}


def summary(results: dict) -> list[dict]:
    """One line per task and direction: rows equal, the goal, answers/s both sides."""
    return [{"task": task, "direction": direction, **{key: found[key] for key in ("rows", "equal", "goal", "met")},
             "differences": len(found["differences"]),
             **{key: found.get(key, "") for key in ("equal_but_for_words", "max_probability_difference")},
             "served_answers_per_s": found.get("speed", {}).get("kerasbert_served_rest", ""),
             "pipeline_answers_per_s": found.get("speed", {}).get("transformers_pipeline", "")}
            for task in TASKS for direction, found in results.get(task, {}).items()]


PARTS = {"train": part_train, "speed": part_speed, "in": part_in, "out": part_out}


def main(argv=None) -> int:
    parser = bench_parser("tasks", __doc__, peer_python=True)
    parser.add_argument("--tasks", nargs="+", default=["ner", "squad"], choices=TASKS)
    parser.add_argument("--parts", nargs="+", default=["train", "speed"], choices=list(PARTS),
                        help="train and speed (bench-tasks), or in and out (bench-transformers).")
    parser.add_argument("--config_dir", default="pipelines/configs", help="Folder of finetune_{ner,squad}.json.")
    parser.add_argument("--max_steps", type=int, default=0, help=f"Training steps (0: the config's; in: {STEPS}).")
    parser.add_argument("--train_batch_size", type=int, default=0, help="Both sides' training batch (0: the config's).")
    parser.add_argument("--continue_steps", type=int, default=20, help="out: kerasbert's steps on the imported runs.")
    parser.add_argument("--train_examples", type=int, default=0, help="Training examples (0: all).")
    parser.add_argument("--dev_examples", type=int, default=0, help="Dev examples scored and timed (0: all).")
    parser.add_argument("--seed", type=int, default=None, help="Both sides' training seed (default: the config's).")
    parser.add_argument("--batch_size", type=int, default=32, help="Rows per inference call or request.")
    parser.add_argument("--repeats", type=int, default=1, help="Timed passes over the dev rows (speed).")
    args = parser.parse_args(argv)
    bridge = {"in", "out"} & set(args.parts)
    if bridge and set(args.parts) - bridge:
        parser.error("train and speed write the folders in and out write: give each its own --output_dir")
    if "sst" in args.tasks and not bridge:
        parser.error("sst has the in part only (kerasbert's own runs are ner and squad)")
    args.argv = sys.argv[1:] if argv is None else list(argv)
    runs = [(part, task) for task in args.tasks for part in args.parts if (part, task) != ("out", "sst")]
    title = TITLES["in" if bridge else "train"]
    if len(runs) > 1:  # each in a process of its own
        for part, task in runs:
            subprocess.run([sys.executable, "-m", "benchmarks.tasks", *args.argv, "--parts", part, "--tasks", task],
                           check=True)
        print(save_results(args.output_dir, load_results(args.output_dir), "benchmarks.tasks", title))
        return 0
    (part, task), = runs
    print(f"== bench-tasks: {part} {task}", flush=True)
    results = load_results(args.output_dir)
    PARTS[part](args, task, results)
    if bridge:
        results = {"summary": summary(results), **{k: v for k, v in results.items() if k != "summary"}}
    save_results(args.output_dir, results, "benchmarks.tasks", title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
