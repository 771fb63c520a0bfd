"""The transformers bridge (kerasbert/hf/) answer by answer: the same checkpoints run by
transformers and served by kerasbert, in both directions, on the dev rows.

    make bench-transformers
    python -m benchmarks.transformers_bridge --max_steps 30 --train_examples 600 --dev_examples 64  # a reduced one

in    transformers (benchmarks/peer_tasks.py in .venv-peer) fine-tunes MiniLM for SST-5 classes,
      CoNLL-2003 entities and SQuAD answers and saves each with save_pretrained; kerasbert imports
      it (pipelines.import_transformers), exports it (pipelines.export) and serves it (`python -m
      serving`, REST, batch 32) against transformers on the same folder (peer_tasks `outputs`).
out   the imported NER and SQuAD runs fine-tuned further by kerasbert (pipelines.finetune
      --init_checkpoint with the task's config, `--continue_steps`: the heads carry on), exported
      --format transformers and as a SavedModel: transformers on that folder against the server.
Goals: classes equal on at least 99.5% of rows and probabilities within 1e-4; entities (type,
offsets, text) and answers (text, offsets) equal on at least 99% of rows; every row that
differs is listed with its likely cause (CAUSES). Speed: answers/s of the served signature
against transformers' pipeline (peer_tasks `pipeline`) on the same rows, in the same run.
A step whose output is on disk is kept when the command runs again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from benchmarks.peer_protocol import load_examples, save_examples
from benchmarks.peers import run_peer
from benchmarks.results import load_results, save_results, timestamp
from benchmarks.tasks import inputs_of, peer_settings, prepare, run

TASKS = ("sst", "ner", "squad")
SIGNATURES = {"sst": "classifier", "ner": "entities", "squad": "answer"}  # the imported heads' names
STEPS = {"sst": 60, "ner": 60, "squad": 24}  # the peer's, at --train_batch_size
GOALS = {"sst": 0.995, "ner": 0.99, "squad": 0.99}
PROBABILITY_TOLERANCE = 1e-4
CAUSES = {
    "words": "a word with punctuation: the tasks declare words=\"punctuation\" (BERT's basic tokenizer's "
             "words, as transformers' BertPreTokenizer), so the two should split alike",
    "logits": "a near tie: kerasbert's encoder computes keras-hub's tanh GELU, the checkpoint says the "
              "exact one (hidden_act 'gelu'); logits differ by about 1e-3",
    "window": "a context of several windows: kerasbert starts a span only in its first piece's max-context "
              "window (run_squad.py); run_qa.py's postprocessing takes the best span of any window",
}
TITLE = "The transformers bridge: kerasbert served against transformers on the same checkpoints"


def prepare_classes(args) -> tuple[str, dict]:
    """inputs/sst/ for the peer: SST-5 rows (`text`, class index `label`), shuffled, cut, settings."""
    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.data.task_files import read_task_file, read_training_file

    steps = args.max_steps or STEPS["sst"]
    config = load_config(FinetuneConfig, None, [
        "tasks=sst", "data.max_sequence_length=128", "train.learning_rate=1e-4", "train.warmup_fraction=0.1",
        f"train.batch_size={args.train_batch_size}", f"train.total_steps={steps}", f"train.steps_per_block={steps}"])
    spec, read = read_training_file(config.tasks["sst"], os.path.join(args.data_dir, config.tasks["sst"].train_file))
    train = [{"text": e.text_a, "label": int(e.label)} for e in read.examples]
    random.Random(config.train.seed).shuffle(train)
    train = train[:args.train_examples or None]
    dev = [{"id": e.uid, "text": e.text_a, "label": int(e.label)}
           for e in read_task_file(spec, os.path.join(args.data_dir, spec.dev_file)).examples][:args.dev_examples or None]
    folder = os.path.join(args.output_dir, "inputs", "sst")
    os.makedirs(folder, exist_ok=True)
    save_examples(os.path.join(folder, "train.jsonl"), train)
    save_examples(os.path.join(folder, "dev.jsonl"), dev)
    settings = peer_settings(config, spec, train, dev)
    with open(os.path.join(folder, "settings.json"), "w") as f:
        json.dump(settings, f, indent=2)
    return folder, settings


def peer(args, command: str, task: str, model_dir: str, name: str, extra=()) -> dict:
    """peer_tasks `command` on inputs/<task>/ and `model_dir`; kept in peer/<name>.json."""
    output = os.path.join(args.output_dir, "peer", f"{name}.json")
    if os.path.exists(output):
        with open(output) as f:
            return json.load(f)
    return run_peer(args.peer_python, command, ["--inputs", os.path.join(args.output_dir, "inputs", task),
                                                "--model_dir", model_dir, *extra], output,
                    module="benchmarks.peer_tasks")


def once(path: str, command: list[str]) -> str:
    """Runs `command` unless `path` (what it writes) is there; returns `path`."""
    if not os.path.exists(path):
        run(command)
    return path


def served(args, task: str, export_base: str, dev: list[dict]) -> tuple[list[dict], float]:
    """Each dev row's answer from `python -m serving` on `export_base` (REST, --batch_size rows a
    request, after one untimed request), and the answers/s of that pass."""
    from serving.client import ServingClient
    from serving.process import LocalServer

    name, batches = f"{task}-{os.path.basename(export_base)}", [dev[b:b + args.batch_size]
                                                              for b in range(0, len(dev), args.batch_size)]
    with LocalServer(name, export_base, log_path=os.path.join(args.output_dir, f"server-{name}.log"),
                     extra_flags=["--rest_api_timeout_in_ms=600000"]) as server:
        server.wait_for_version(1)
        client = ServingClient(name, rest_port=server.rest_port, grpc_port=server.grpc_port, protocol="rest",
                               timeout=600)

        def ask(rows):
            return client.predict(SIGNATURES[task], {"text": [r["text"] for r in rows]} if task == "sst"
                                  else inputs_of(task, rows))
        ask(batches[0])
        started = time.perf_counter()
        answers = [ask(batch) for batch in batches]
        seconds = time.perf_counter() - started
    rows = [{key: values[row] for key, values in answer.items()} for answer, batch in zip(answers, batches)
            for row in range(len(batch))]
    return rows, len(dev) / seconds


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


def agreement(task: str, dev: list[dict], ours: list[dict], theirs: list[dict], settings: dict) -> dict:
    """Rows equal, the goal, and every row that differs with its likely cause (CAUSES): "words"
    where an entity that differs covers a word with punctuation (ex-England, U.S., O'Brien)."""
    if task == "sst":
        gaps = [max(abs(o["probabilities"][k] - t["probabilities"][k]) for k in t["probabilities"])
                for o, t in zip(ours, theirs)]
        best = [[max(side["probabilities"], key=side["probabilities"].get) for side in pair] for pair in zip(ours, theirs)]
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


def compare(args, task: str, export_base: str, hf_folder: str, name: str, settings: dict) -> tuple[dict, float]:
    """Served answers of `export_base` against transformers' on `hf_folder`; (agreement, served answers/s)."""
    dev = load_examples(os.path.join(args.output_dir, "inputs", task, "dev.jsonl"))
    theirs = peer(args, "outputs", task, hf_folder, f"{name}-outputs", ["--batch_size", str(args.batch_size)])
    rows, rate = served(args, task, export_base, dev)
    ours = [as_peer_row(task, row, settings.get("class_names", [])) for row in rows]
    return agreement(task, dev, ours, theirs["rows"], settings), rate


def part_in(args, task: str, results: dict) -> None:
    """transformers fine-tunes, saves; kerasbert imports, exports, serves; both answer the dev rows."""
    from kerasbert.models.encoder import minilm_checkpoint

    task_args = argparse.Namespace(**{**vars(args), "max_steps": args.max_steps or STEPS[task]})
    folder, settings = prepare_classes(task_args) if task == "sst" else prepare(task_args, task)
    peer_dir = os.path.join(args.output_dir, "peer", task)
    trained = peer(args, "train", task, peer_dir, f"{task}-train", ["--checkpoint", minilm_checkpoint()])
    imported = once(os.path.join(args.output_dir, "imported", task), [
        sys.executable, "-m", "pipelines.import_transformers", "--checkpoint", peer_dir, "--output_dir",
        os.path.join(args.output_dir, "imported", task), "--sequence_length",
        "0" if task == "ner" else str(settings["sequence_length"])])  # ner: 512, as transformers' pipeline
    export_base = os.path.join(args.output_dir, "export", task)
    once(os.path.join(export_base, "1"), [sys.executable, "-m", "pipelines.export", "--model_dir", imported,
                                          "--export_base", export_base])
    found, rate = compare(args, task, export_base, peer_dir, task, settings)
    pipeline = peer(args, "pipeline", task, peer_dir, f"{task}-pipeline", ["--batch_size", str(args.batch_size)])
    theirs = pipeline["answers_per_second"][0]
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
    with open(os.path.join(folder, "settings.json")) as f:
        settings = json.load(f)
    run_dir, steps = os.path.join(args.output_dir, "kerasbert", task), str(args.continue_steps)
    once(os.path.join(run_dir, "metrics.json"), [
        sys.executable, "-m", "pipelines.finetune", "--config", os.path.join(folder, "config.json"), "--data_dir",
        args.data_dir, "--init_checkpoint", os.path.join(args.output_dir, "imported", task), "--output_dir", run_dir,
        "--set", f"train.total_steps={steps}", "--set", f"train.steps_per_block={steps}",
        "--set", f"train.batch_size={args.train_batch_size}", "--set", "train.warmup_fraction=0",
        *(["--set", "data.max_sequence_length=512", "--set", "tasks.ner.words=punctuation"] if task == "ner" else [])])
    hf_base, export_base = (os.path.join(args.output_dir, part, task) for part in ("hf", "export-out"))
    once(os.path.join(hf_base, task), [sys.executable, "-m", "pipelines.export", "--model_dir", run_dir, "--format", "transformers",
                   "--export_base", hf_base])
    once(os.path.join(export_base, "1"), [sys.executable, "-m", "pipelines.export", "--model_dir", run_dir,
                                          "--export_base", export_base])
    found, _ = compare(args, task, export_base, os.path.join(hf_base, task), f"{task}-out", settings)
    with open(os.path.join(run_dir, "metrics.json")) as f:
        metrics = json.load(f)
    results.setdefault(task, {})["out"] = {
        **found, "kerasbert_steps": args.continue_steps,
        "dev": {key: metrics[key] for key in ("ner_f1", "squad_f1", "squad_exact_match") if key in metrics},
        "finished": timestamp()}


def summary(results: dict) -> list[dict]:
    """One line per task and direction: rows equal, the goal, answers/s both sides."""
    lines = []
    for task in TASKS:
        for direction, found in results.get(task, {}).items():
            speed = found.get("speed", {})
            lines.append({"task": task, "direction": direction, "rows": found["rows"], "equal": found["equal"],
                          "goal": found["goal"], "met": found["met"], "differences": len(found["differences"]),
                          "equal_but_for_words": found.get("equal_but_for_words", ""),
                          "max_probability_difference": found.get("max_probability_difference", ""),
                          "served_answers_per_s": speed.get("kerasbert_served_rest", ""),
                          "pipeline_answers_per_s": speed.get("transformers_pipeline", "")})
    return lines


def main(argv=None) -> int:
    from kerasbert.data.corpus import default_data_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.transformers_bridge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    parser.add_argument("--output_dir", default="runs/bench-transformers", help="Results folder.")
    parser.add_argument("--peer_python", default=".venv-peer/bin/python", help="The peer environment's Python.")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--config_dir", default="pipelines/configs", help="Folder of finetune_ner.json and "
                        "finetune_squad.json (the way out's configs).")
    parser.add_argument("--max_steps", type=int, default=0, help=f"The peer's training steps (0: {STEPS}).")
    parser.add_argument("--train_batch_size", type=int, default=16, help="Training batch of both sides.")
    parser.add_argument("--continue_steps", type=int, default=20, help="kerasbert's steps on the imported runs.")
    parser.add_argument("--train_examples", type=int, default=0, help="Training examples (0: all).")
    parser.add_argument("--dev_examples", type=int, default=300, help="Dev rows compared and timed (0: all).")
    parser.add_argument("--batch_size", type=int, default=32, help="Rows per request and pipeline call.")
    args = parser.parse_args(argv)
    args.seed = None  # benchmarks.tasks' configs: their own seeds
    results = load_results(args.output_dir, default={})
    for task in args.tasks:
        for part in (part_in, part_out) if task != "sst" else (part_in,):
            print(f"== bench-transformers: {task} {part.__name__[5:]}", flush=True)
            part(args, task, results)
            results = {"summary": summary(results), **{k: v for k, v in results.items() if k != "summary"}}
            save_results(args.output_dir, results, "benchmarks.transformers_bridge", TITLE)
    print(save_results(args.output_dir, results, "benchmarks.transformers_bridge", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
