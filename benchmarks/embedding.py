"""Sentence embeddings from all-MiniLM-L6-v2: kerasbert against sentence-transformers
(benchmarks/peer_sbert.py, in .venv-peer) on the same pairs, steps, batch size, learning rate,
warmup and max length; docs/embedding.md tells what is measured and the figures.

    make bench-embedding                                      # both parts, 3 seeds
    python -m benchmarks.embedding --parts sts --seeds 1 --sts_steps 40   # a quick look

Parts (each seed's run kept in results.json; the command run again does only what is missing):
    sts     STS-B dev Spearman of cos(u, v) against the 0-5 scores: the checkpoint as it is
            (zero-shot), then fine-tuned on STS-B train with CoSENT (scale 20) by
            pipelines.finetune (the embedding family) and by sentence-transformers' fit
    quora   Quora duplicate retrieval on the dev duplicates: each question (text_a) ranks every
            dev duplicate's text_b by cosine; recall@1 and MRR@10; zero-shot, then fine-tuned on
            the train duplicates as (anchor, positive) pairs, in-batch negatives (multiple-negatives
            ranking, scale 20)
Every side's embeddings (mean pooling, L2-normalised) are scored here by the same functions (the
embedding family's); the seeds' paired differences (kerasbert - sentence-transformers) get a 95% t
interval. kerasbert trains in one block: its run keeps the last weights, as fit does, not a best
block chosen on dev; its run's own dev metric is kept beside the bench's (`own_evaluation`).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import numpy as np

from benchmarks.peer_protocol import read_json, save_examples, write_json
from benchmarks.results import ROOT, bench_parser, check_peer_python, load_results, render_markdown, save_results

TITLE = "Sentence embeddings from all-MiniLM-L6-v2: kerasbert against sentence-transformers"
SIDES = ("kerasbert", "sentence_transformers")
PARTS = {  # the shared data's files (cs224n/), the shipped task that reads them, the peer's loss
    "sts": {"train": "sts-train.tsv", "dev": "sts-dev.tsv", "reader": "sts", "loss": "cosent"},
    "quora": {"train": "quora-train.tsv", "dev": "quora-dev.tsv", "reader": "para", "loss": "mnrl"},
}
HEADLINE = {"sts": "spearman", "quora": "recall_at_1"}
TASK_NAMES = {"sts": "sim", "quora": "dup"}  # kerasbert's embedding tasks


# --- Scores (every side's embeddings alike: the embedding family's own scorers) -------------

def unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def paired_interval(ours: list[float], theirs: list[float], confidence: float = 0.95) -> dict:
    """The mean of the paired differences ours - theirs and its `confidence` t interval.

    >>> interval = paired_interval([0.80, 0.82, 0.81], [0.79, 0.80, 0.81])
    >>> round(interval["mean"], 4), round(interval["low"], 4), round(interval["high"], 4)
    (0.01, -0.0148, 0.0348)
    """
    import scipy.stats

    differences = np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)
    mean, count = float(differences.mean()), len(differences)
    half = (float(scipy.stats.t.ppf((1 + confidence) / 2, count - 1) * differences.std(ddof=1) / np.sqrt(count))
            if count > 1 else float("nan"))
    return {"mean": mean, "low": mean - half, "high": mean + half, "differences": differences.tolist()}


def scores(part: str, embeddings: np.ndarray, dev: list[dict]) -> dict[str, float]:
    """The part's scores of the dev texts' embeddings (`dev_texts` order: every text_a, then every
    text_b), by kerasbert's embedding family's scorers (its `T_spearman`, `T_recall_at_1` and
    `T_mrr_at_10`: each anchor ranks every dev positive, a tie counting against it).

    >>> a, b = np.array([[1.0, 0.0], [1.0, -1.0]]), np.array([[1.0, 0.0], [1.0, 0.5]])  # anchor 1: b[0] first
    >>> scores("quora", np.concatenate([a, b]), [{}, {}])
    {'recall_at_1': 0.5, 'mrr_at_10': 0.75}
    """
    from kerasbert.families.embedding.ranking import ranking_scores, spearman

    a, b = unit(embeddings[:len(dev)]), unit(embeddings[len(dev):])
    if part == "sts":
        return {"spearman": spearman(np.sum(a * b, axis=1), [pair["label"] for pair in dev])}
    return ranking_scores(a, b)


# --- The pairs both sides read --------------------------------------------------------------

def read_pairs(data_dir: str, part: str, split: str) -> list[dict]:
    """The part's pairs as kerasbert's shipped task reads them (quirks cleaned, damaged rows
    passed over); Quora's: its duplicates only."""
    from kerasbert.data.task_files import read_training_file
    from kerasbert.tasks import get_task

    spec = PARTS[part]
    _, read = read_training_file(get_task(spec["reader"]), os.path.join(data_dir, "cs224n", spec[split]))
    if part == "sts":
        return [{"text_a": e.text_a, "text_b": e.text_b, "label": float(e.label)} for e in read.examples]
    return [{"text_a": e.text_a, "text_b": e.text_b} for e in read.examples if int(e.label) == 1]


def dev_texts(dev: list[dict]) -> list[str]:
    return [pair["text_a"] for pair in dev] + [pair["text_b"] for pair in dev]


def prepare(args, part: str) -> str:
    """inputs/<part>/: dev.jsonl and dev_texts.json, and train-<seed>.jsonl (the train pairs shuffled
    by the seed) for every seed."""
    folder = os.path.join(args.output_dir, "inputs", part)
    os.makedirs(folder, exist_ok=True)
    dev = read_pairs(args.data_dir, part, "dev")
    save_examples(os.path.join(folder, "dev.jsonl"), dev)
    write_json(os.path.join(folder, "dev_texts.json"), dev_texts(dev))
    train = read_pairs(args.data_dir, part, "train")
    for seed in args.seeds:
        order = list(train)
        random.Random(seed).shuffle(order)
        save_examples(os.path.join(folder, f"train-{seed}.jsonl"), order)
    return folder


# --- kerasbert ------------------------------------------------------------------------------

def kerasbert_embeddings(model, preprocessor, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """(texts, hidden) sentence embeddings of `model` (a MultitaskBert), L2-normalised."""
    import tensorflow as tf

    parts = [model.embed(preprocessor.pack(tf.constant(texts[i:i + batch_size]))).numpy()
             for i in range(0, len(texts), batch_size)]
    return unit(np.concatenate(parts)).astype(np.float32)


def kerasbert_zero_shot(args, texts: list[str]) -> np.ndarray:
    """The checkpoint as kerasbert imports it (mean pooling: what MiniLM was trained with)."""
    from kerasbert.finetuning.data import TaskPreprocessor
    from kerasbert.finetuning.model import MultitaskBert
    from kerasbert.models.encoder import load_encoder
    from kerasbert.tokenization import load_tokenizer

    model = MultitaskBert(load_encoder(args.checkpoint), pooling="mean")
    return kerasbert_embeddings(model, TaskPreprocessor(load_tokenizer(args.checkpoint), args.max_length, "bi"), texts)


def kerasbert_task(part: str, folder: str, seed: int) -> dict:
    """The embedding task pipelines.finetune trains on the seed's pairs: scored pairs (CoSENT) or
    unlabelled (anchor, positive) pairs (multiple-negatives ranking), scale 20 as the peer's."""
    columns = {"text_a": "text_a", "text_b": "text_b", **({"label": "label"} if part == "sts" else {})}
    return {TASK_NAMES[part]: {"kind": "embedding", **columns,
                               "train_file": os.path.abspath(os.path.join(folder, f"train-{seed}.jsonl")),
                               "dev_file": os.path.abspath(os.path.join(folder, "dev.jsonl"))}}


def kerasbert_config(args, part: str, folder: str, seed: int) -> dict:
    """pipelines.finetune's config: the peer's budget and optimizer (AdamW, weight decay 0.01,
    the global gradient norm clipped at 1, linear warmup and decay), one block, no length grouping."""
    steps = budget(args, part)["steps"]
    return {"tasks": kerasbert_task(part, folder, seed),
            "data": {"max_sequence_length": args.max_length, "group_by_length": 0},
            "heads": {"pooling": "mean"},
            "train": {"batch_size": args.batch_size, "total_steps": steps, "steps_per_block": steps,
                      "learning_rate": args.learning_rate, "warmup_fraction": args.warmup_fraction,
                      "weight_decay": 0.01, "clipnorm": 1.0, "clip_scope": "global", "seed": seed}}


def kerasbert_fine_tuned(args, part: str, folder: str, seed: int, texts: list[str]) -> np.ndarray:
    """pipelines.finetune from the checkpoint (a process of its own), then the run's embeddings."""
    from kerasbert.finetuning.load import load_finetuned

    run = os.path.join(args.output_dir, "runs", part, f"kerasbert-{seed}")
    config = os.path.join(folder, f"kerasbert-{seed}.json")
    write_json(config, kerasbert_config(args, part, folder, seed))
    subprocess.run([sys.executable, "-m", "pipelines.finetune", "--config", config, "--output_dir", run,
                    "--init_checkpoint", args.checkpoint, "--overwrite"], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": ROOT})
    _, model, preprocessor = load_finetuned(run)
    return kerasbert_embeddings(model, preprocessor, texts)


def own_evaluation(args, part: str, seed: int) -> float:
    """The kerasbert run's own dev score (metrics.json) of the part's headline metric."""
    metrics = read_json(os.path.join(args.output_dir, "runs", part, f"kerasbert-{seed}", "metrics.json"))
    return metrics[f"{TASK_NAMES[part]}_{HEADLINE[part]}"]


# --- sentence-transformers ------------------------------------------------------------------

def peer_embeddings(args, part: str, folder: str, seed: int | None) -> np.ndarray:
    """benchmarks.peer_sbert's embeddings of the dev texts: the checkpoint as it is (seed None)
    or after its fit on the seed's pairs."""
    check_peer_python(args.peer_python)
    work = os.path.join(args.output_dir, "runs", part, f"sentence_transformers-{seed or 'zero'}")
    os.makedirs(work, exist_ok=True)  # fit's Trainer writes its folder under the working one
    output = os.path.join(work, "dev_embeddings.npy")
    command = [os.path.abspath(args.peer_python), "-m", "benchmarks.peer_sbert", "train" if seed else "embed",
               "--checkpoint", args.checkpoint, "--texts", os.path.abspath(os.path.join(folder, "dev_texts.json")),
               "--output", os.path.abspath(output), "--max_length", str(args.max_length)]
    if seed:
        steps = budget(args, part)["steps"]
        command += ["--pairs", os.path.abspath(os.path.join(folder, f"train-{seed}.jsonl")),
                    "--loss", PARTS[part]["loss"], "--steps", str(steps), "--batch_size", str(args.batch_size),
                    "--learning_rate", str(args.learning_rate), "--seed", str(seed),
                    "--warmup_steps", str(int(args.warmup_fraction * steps))]
    subprocess.run(command, check=True, cwd=os.path.abspath(work), env={**os.environ, "PYTHONPATH": ROOT})
    return np.load(output)


# --- The bench ------------------------------------------------------------------------------

def budget(args, part: str) -> dict:
    return {"steps": {"sts": args.sts_steps, "quora": args.quora_steps}[part], "batch_size": args.batch_size,
            "learning_rate": args.learning_rate, "warmup_fraction": args.warmup_fraction,
            "max_length": args.max_length, "peer_loss": PARTS[part]["loss"]}


def run_part(args, part: str, results: dict) -> None:
    """Zero-shot both sides, then each seed's fine-tuning both sides; saved after each run."""
    folder = prepare(args, part)
    with open(os.path.join(folder, "dev_texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    dev = [json.loads(line) for line in open(os.path.join(folder, "dev.jsonl"), encoding="utf-8")]
    section = results.setdefault(part, {})
    section["budget"] = budget(args, part)
    section["dev_pairs"] = len(dev)
    runs = section.setdefault("runs", {})
    sides = {"kerasbert": (lambda seed: kerasbert_zero_shot(args, texts) if seed is None
                           else kerasbert_fine_tuned(args, part, folder, seed, texts)),
             "sentence_transformers": lambda seed: peer_embeddings(args, part, folder, seed)}
    for seed in [None, *args.seeds]:
        for side, embed in sides.items():
            key = f"{side}-{seed or 'zero'}"
            if key in runs and not args.overwrite:
                continue
            print(f"== {part}: {key}", flush=True)
            started = time.perf_counter()
            embeddings = embed(seed)
            runs[key] = {**scores(part, embeddings, dev), "wall_seconds": time.perf_counter() - started}
            if side == "kerasbert" and seed is not None:
                runs[key]["own_evaluation"] = own_evaluation(args, part, seed)
            if seed is None:
                np.save(os.path.join(folder, f"zero-{side}.npy"), embeddings)
            summarise(part, section, args.seeds)
            save_results(args.output_dir, results, "benchmarks.embedding", TITLE)
    zero = [np.load(os.path.join(folder, f"zero-{side}.npy")) for side in SIDES]
    section["zero_shot_max_abs_difference"] = float(np.max(np.abs(zero[0] - zero[1])))
    save_results(args.output_dir, results, "benchmarks.embedding", TITLE)


def summarise(part: str, section: dict, seeds: list[int]) -> None:
    """The table rows: zero-shot and each seed's fine-tuned score per side, and the paired interval."""
    runs, metric = section["runs"], HEADLINE[part]
    rows = [{"seed": "zero-shot", **{side: runs.get(f"{side}-zero", {}).get(metric, "") for side in SIDES}}]
    done = [seed for seed in seeds if all(f"{side}-{seed}" in runs for side in SIDES)]
    for seed in done:
        ours, theirs = (runs[f"{side}-{seed}"][metric] for side in SIDES)
        rows.append({"seed": seed, "kerasbert": ours, "sentence_transformers": theirs, "difference": ours - theirs})
    section["table"] = rows
    if done:
        interval = paired_interval(*([runs[f"{side}-{seed}"][metric] for seed in done] for side in SIDES))
        section[f"{metric}_difference"] = {key: interval[key] for key in ("mean", "low", "high")}
        if "kerasbert-zero" in runs:
            ours = [runs[f"kerasbert-{seed}"][metric] for seed in done]
            section["kerasbert_gain_over_zero_shot"] = float(np.mean(ours)) - runs["kerasbert-zero"][metric]


def main(argv=None) -> int:
    from kerasbert.models.encoder import minilm_checkpoint

    parser = bench_parser("embedding", __doc__, peer_python=True)
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="One fine-tuning run a seed a side.")
    parser.add_argument("--sts_steps", type=int, default=360, help="STS-B steps (360 x 16: about 1 epoch).")
    parser.add_argument("--quora_steps", type=int, default=300, help="Quora steps.")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--warmup_fraction", type=float, default=0.1)
    parser.add_argument("--max_length", type=int, default=128, help="Tokens a sentence keeps, both sides.")
    parser.add_argument("--checkpoint", default=None, help="A sentence-transformers folder (default: MiniLM's).")
    parser.add_argument("--overwrite", action="store_true", help="Run again what results.json already has.")
    args = parser.parse_args(argv)
    args.checkpoint = args.checkpoint or minilm_checkpoint()
    results = load_results(args.output_dir)
    for part in args.parts:
        run_part(args, part, results)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
