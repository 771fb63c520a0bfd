"""The peer of `benchmarks.tasks`: Hugging Face `transformers` fine-tuning MiniLM for named
entities (`BertForTokenClassification`, as `run_ner.py`) and extractive QA
(`BertForQuestionAnswering`, as `run_qa.py`), then timing raw text to entities and answers. It
runs in the peer environment (`.venv-peer`) and imports torch, transformers and NumPy
only; examples, settings and predictions pass through files (benchmarks/peer_protocol.py).

    python -m benchmarks.peer_tasks train --inputs DIR --checkpoint MINILM --model_dir OUT --output OUT.json
    python -m benchmarks.peer_tasks pipeline --inputs DIR --model_dir OUT --batch_size 32 --output OUT.json
    python -m benchmarks.peer_tasks outputs --inputs DIR --model_dir OUT --output OUT.json
    python -m benchmarks.peer_tasks features --inputs DIR --model_dir MINILM --output OUT.json

`DIR/settings.json` holds `kind` ("tags", "span" or "classes": `BertForSequenceClassification`
on `text` (and `text_b`), class index `label`, `class_names`), the sequence length, batch size,
steps (and steps per block), learning rate, warm-up steps, weight decay and clipping; `DIR/train.jsonl` the
training examples in training order (taken in turn, epoch after epoch); `DIR/dev.jsonl`
the examples scored. `train` writes the dev predictions after each block to OUT.json's
`block_predictions` (tags per word; {id: answer}; the last block's also as `predictions`):
benchmarks.tasks scores them with kerasbert's own scorers. A killed `train` resumes from the
last finished block (OUT/state.pt).

Tagging labels each word's first piece (-100 elsewhere) and predicts a word's tag there, as
run_ner.py; a word cut off by the sequence length is predicted "O". QA windows are packed
as BERT's run_squad.py and kerasbert do ([CLS] question [SEP] window [SEP], the question
cut to `max_query_length` pieces, windows `doc_stride` pieces apart): transformers'
tokenizer `stride` is an overlap, so the windows are cut by hand to stay the same.
Answers are chosen as run_qa.py's postprocessing: the 20 best starts and ends of every
window, spans inside the context, end not before start, at most `max_answer_length`
pieces, best start + end logit over all windows.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
import transformers

from benchmarks.peer_protocol import load_examples, read_json, time_batches, write_json
from benchmarks.peer_torch import make_optimizer, restore_state, save_state, update, versions

N_BEST = 20  # run_qa.py's n_best_size


def settings_of(inputs: str) -> dict:
    return read_json(os.path.join(inputs, "settings.json"))


# --- Features --------------------------------------------------------------------------

def tag_features(tokenizer, examples: list[dict], settings: dict) -> dict:
    """Padded encoder inputs, first-piece `labels` (-100 elsewhere) and, per row, each
    word's first-piece position (-1: cut off)."""
    tag_ids = {tag: i for i, tag in enumerate(settings["tag_names"])}
    length = settings["sequence_length"]
    encoded = tokenizer([e["words"] for e in examples], is_split_into_words=True, truncation=True,
                        max_length=length, padding="max_length", return_tensors="np")
    labels = np.full((len(examples), length), -100, np.int64)
    firsts = []
    for row, example in enumerate(examples):
        first = [-1] * len(example["words"])
        for position, word in enumerate(encoded.word_ids(row)):
            if word is not None and first[word] < 0:
                first[word] = position
                labels[row, position] = tag_ids.get(example.get("tags", ["O"] * len(first))[word], 0)
        firsts.append(first)
    return {"input_ids": encoded["input_ids"], "token_type_ids": encoded["token_type_ids"],
            "attention_mask": encoded["attention_mask"], "labels": labels, "first": firsts}


def class_features(tokenizer, examples: list[dict], settings: dict) -> dict:
    """Padded encoder inputs of each example's `text` (and `text_b`, for pairs) and its class
    index `label`."""
    pairs = [e["text_b"] for e in examples] if "text_b" in examples[0] else None
    encoded = tokenizer([e["text"] for e in examples], pairs, truncation=True, padding="max_length",
                        max_length=settings["sequence_length"], return_tensors="np")
    return {**{key: encoded[key] for key in MODEL_INPUTS}, "labels": np.array([e["label"] for e in examples])}


def span_windows(tokenizer, examples: list[dict], settings: dict) -> dict:
    """Every window of every example: encoder inputs (windows, length), the window's
    `example`, each position's character span in the context (None outside it), and
    `start_positions`/`end_positions` of the first answer (0 where the window lacks it)."""
    length, stride = settings["sequence_length"], settings["doc_stride"]
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    rows = {key: [] for key in ("input_ids", "token_type_ids", "attention_mask", "example", "offsets",
                                "start_positions", "end_positions")}
    for index, example in enumerate(examples):
        question = tokenizer(example["question"], add_special_tokens=False)["input_ids"][:settings["max_query_length"]]
        context = tokenizer(example["context"], add_special_tokens=False, return_offsets_mapping=True)
        ids, spans = context["input_ids"], context["offset_mapping"]
        answer = example["answers"][0] if example.get("answers") else None
        inside = [i for i, (s, e) in enumerate(spans)
                  if answer and e > answer["start"] and s < answer["start"] + len(answer["text"])]
        if answer and not inside:
            continue  # the answer covers no piece: kerasbert skips it too
        room = length - 3 - len(question)
        count = 1 + (max(len(ids) - room, 0) + stride - 1) // stride
        for window in range(count):
            begin = window * stride
            pieces = ids[begin:begin + room]
            tokens = [cls, *question, sep, *pieces, sep]
            offset = len(question) + 2  # the first context piece's position
            start = end = 0
            if inside and begin <= inside[0] and inside[-1] < begin + len(pieces):
                start, end = offset + inside[0] - begin, offset + inside[-1] - begin
            rows["input_ids"].append(tokens + [pad] * (length - len(tokens)))
            rows["token_type_ids"].append([0] * offset + [1] * (len(pieces) + 1) + [0] * (length - len(tokens)))
            rows["attention_mask"].append([1] * len(tokens) + [0] * (length - len(tokens)))
            rows["example"].append(index)
            rows["offsets"].append([None] * offset + spans[begin:begin + len(pieces)]
                                   + [None] * (length - offset - len(pieces)))
            rows["start_positions"].append(start)
            rows["end_positions"].append(end)
    return {key: np.array(values, np.int64) if key not in ("offsets",) else values for key, values in rows.items()}


MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
LABELS = {"tags": ("labels",), "span": ("start_positions", "end_positions"), "classes": ("labels",)}


def features_of(kind: str, tokenizer, examples: list[dict], settings: dict) -> dict:
    builder = {"tags": tag_features, "span": span_windows, "classes": class_features}[kind]
    return builder(tokenizer, examples, settings)


def model_of(kind: str, checkpoint: str, settings: dict):
    if kind == "span":
        return transformers.BertForQuestionAnswering.from_pretrained(checkpoint)
    names = settings["tag_names" if kind == "tags" else "class_names"]
    head = transformers.BertForTokenClassification if kind == "tags" else transformers.BertForSequenceClassification
    return head.from_pretrained(checkpoint, num_labels=len(names), id2label=dict(enumerate(names)),
                                label2id={name: i for i, name in enumerate(names)})


# --- Training and dev predictions ------------------------------------------------------

def train_blocks(model, features: dict, kind: str, settings: dict, state_path: str, score_block) -> dict:
    """`total_steps` steps of `batch_size` rows from `features` (`batch_rows`), each cut to its
    longest row (`trimmed`; the loss is the model's own: mean cross-entropy over labelled
    tokens; mean of start and end), AdamW with kerasbert's warm-up and decay, each gradient
    clipped alone; in blocks of `steps_per_block`, as kerasbert's run. After each block,
    `score_block(model)` (its dev predictions) and the whole state (weights, optimizer,
    schedule, random state, each block's rate and predictions) are saved to `state_path`
    (written whole, then renamed): a killed run resumes at its last finished block. A
    block's examples/s leaves out its first step, as kerasbert's."""
    torch.manual_seed(settings["seed"])
    optimizer, scheduler = make_optimizer(model, settings)
    keys = (*MODEL_INPUTS, *LABELS[kind])
    size, total = settings["batch_size"], settings["total_steps"]
    per_block = settings.get("steps_per_block") or total
    batches = batch_rows(features["attention_mask"].sum(axis=1), size, total,
                         settings.get("group_by_length", 0), settings["seed"])
    progress = {"blocks_done": 0, "block_rates": [], "block_losses": [], "block_predictions": []}
    if os.path.exists(state_path):
        saved = restore_state(state_path, model, optimizer, scheduler)
        if saved["settings"] != settings:
            raise SystemExit(f"{state_path}: a run with other settings; remove it to start again.")
        progress = saved["progress"]
        print(f"peer: resuming after block {progress['blocks_done']} ({state_path})", flush=True)
    for block in range(progress["blocks_done"], -(-total // per_block)):
        model.train()
        steps, losses, started = range(block * per_block, min(total, (block + 1) * per_block)), [], None
        for done, step in enumerate(steps):
            if done == 1:
                started = time.perf_counter()
            loss = model(**trimmed({key: features[key][batches[step]] for key in keys})).loss
            losses.append(update(model, optimizer, scheduler, loss, settings))
            if (step + 1) % 20 == 0:  # a block takes tens of minutes here: show it moves
                print(f"peer: step {step + 1}/{total}, loss {np.mean(losses[-20:]):.4f}", flush=True)
        seconds = time.perf_counter() - started if started else float("nan")
        progress["block_rates"].append((len(steps) - 1) * size / seconds)
        progress["block_losses"].append(float(np.mean(losses[-20:])))
        progress["block_predictions"].append(score_block(model))
        progress["blocks_done"] = block + 1
        print(f"peer: block {block + 1}, step {steps[-1] + 1}/{total}: {progress['block_rates'][-1]:.1f} "
              f"examples/s, loss {progress['block_losses'][-1]:.4f}", flush=True)
        save_state(state_path, model, optimizer, scheduler, settings=settings, progress=progress)
    return progress


def batch_rows(lengths: np.ndarray, size: int, steps: int, group: int, seed: int) -> list[np.ndarray]:
    """The rows of each step's batch: rows taken in turn, epoch after epoch; with `group` > 1,
    each run of `group` batches' rows sorted by length, cut into batches, and those batches
    shuffled (kerasbert's `data.group_by_length`; transformers' `group_by_length` sorts
    mega-batches likewise).

    >>> [rows.tolist() for rows in batch_rows(np.array([3, 1, 2, 4]), 2, 3, 2, seed=0)]
    [[1, 2], [0, 3], [1, 2]]
    """
    if group <= 1:
        return [np.arange(step * size, (step + 1) * size) % len(lengths) for step in range(steps)]
    runs = -(-steps // group)
    stream = (np.arange(runs * group * size) % len(lengths)).reshape(runs, group * size)
    rng, batches = np.random.default_rng(seed), []
    for run in stream:
        ordered = run[np.argsort(lengths[run], kind="stable")].reshape(group, size)
        batches.extend(ordered[rng.permutation(group)])
    return batches[:steps]


def trimmed(batch: dict) -> dict:
    """A batch's tensors cut to its longest row, as transformers' collators pad ("longest",
    their default) and as kerasbert trims its batches; positions and labels of one value per
    row are kept whole."""
    width = int(batch["attention_mask"].sum(axis=1).max())
    return {key: torch.from_numpy(np.ascontiguousarray(value[:, :width]) if value.ndim == 2 else value)
            for key, value in batch.items()}


@torch.inference_mode()
def logits_of(model, features: dict, batch_size: int = 64) -> list[np.ndarray]:
    model.eval()
    outputs = []
    for begin in range(0, len(features["input_ids"]), batch_size):
        out = model(**{key: torch.from_numpy(features[key][begin:begin + batch_size]) for key in MODEL_INPUTS})
        outputs.append(out.logits.numpy() if hasattr(out, "logits") and out.logits is not None
                       else np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1))
    return outputs


def predict_tags(model, features: dict, tag_names: list[str]) -> list[list[str]]:
    """Each word's tag at its first piece; "O" for a word cut off."""
    best = np.concatenate(logits_of(model, features)).argmax(-1)  # (rows, length)
    return [[tag_names[best[row, p]] if p >= 0 else "O" for p in first] for row, first in enumerate(features["first"])]


def predict_answers(model, windows: dict, examples: list[dict], max_answer_length: int,
                    batch_size: int = 64, spans: bool = False) -> dict:
    """run_qa.py's postprocessing over every window of each example: {id: answer}, or with
    `spans` {id: (answer, start, end)}, its character offsets in the context."""
    logits = np.concatenate(logits_of(model, windows, batch_size))  # (windows, length, 2)
    best = {}  # example index -> (score, start, end)
    for w, example in enumerate(windows["example"]):
        offsets, start_logits, end_logits = windows["offsets"][w], logits[w, :, 0], logits[w, :, 1]
        for s in np.argsort(start_logits)[::-1][:N_BEST]:
            for e in np.argsort(end_logits)[::-1][:N_BEST]:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(start_logits[s] + end_logits[e])
                if example not in best or score > best[example][0]:
                    best[example] = (score, offsets[s][0], offsets[e][1])
    found = {e["id"]: best.get(i, (0.0, 0, 0))[1:] for i, e in enumerate(examples)}
    return {key: (examples[i]["context"][a:b], a, b) if spans else examples[i]["context"][a:b]
            for i, (key, (a, b)) in enumerate(found.items())}


def train(args) -> dict:
    """Fine-tunes on DIR/train.jsonl (resuming from OUT/state.pt), predicts DIR/dev.jsonl after
    each block, saves the model for `pipeline`."""
    settings = settings_of(args.inputs)
    kind = settings["kind"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.checkpoint)
    torch.manual_seed(settings["seed"])  # the new head's weights: the seed's, as kerasbert's
    model = model_of(kind, args.checkpoint, settings)
    features = features_of(kind, tokenizer, load_examples(os.path.join(args.inputs, "train.jsonl")), settings)
    dev = load_examples(os.path.join(args.inputs, "dev.jsonl"))
    dev_features = features_of(kind, tokenizer, dev, settings)

    def score_block(model):
        if kind == "classes":
            return np.concatenate(logits_of(model, dev_features)).argmax(-1).tolist()
        return (predict_tags(model, dev_features, settings["tag_names"]) if kind == "tags"
                else predict_answers(model, dev_features, dev, settings["max_answer_length"]))

    os.makedirs(args.model_dir, exist_ok=True)
    progress = train_blocks(model, features, kind, settings, os.path.join(args.model_dir, "state.pt"), score_block)
    model.save_pretrained(args.model_dir)
    tokenizer.save_pretrained(args.model_dir)
    rates = progress["block_rates"]
    return {"examples_per_second": float(np.median(rates)), "block_rates": rates,
            "block_losses": progress["block_losses"], "train_rows": len(features["input_ids"]),
            "predictions": progress["block_predictions"][-1], "block_predictions": progress["block_predictions"],
            "versions": versions()}


# --- Inference speed: raw text to entities or answers -----------------------------------

def answerer(settings: dict, model_dir: str, batch_size: int):
    """call(rows) -> transformers' answer for each row: `pipeline("text-classification",
    top_k=None)`'s scores of every class; `pipeline("token-classification",
    aggregation_strategy="first")`'s entities over the words joined by spaces; for questions,
    (answer, start, end, windows) in the context, from the fast tokenizer + BertForQuestionAnswering +
    run_qa.py's postprocessing above: transformers 5 has no `pipeline("question-answering")`
    any more (it points to chat models)."""
    kind = settings["kind"]
    if kind == "classes":
        run = transformers.pipeline("text-classification", model=model_dir, top_k=None)
        return lambda rows: run([{"text": r["text"], "text_pair": r["text_b"]} if "text_b" in r else r["text"]
                                 for r in rows], batch_size=batch_size)
    if kind == "tags":
        run = transformers.pipeline("token-classification", model=model_dir, aggregation_strategy="first")
        return lambda rows: run([" ".join(r["words"]) for r in rows], batch_size=batch_size)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.BertForQuestionAnswering.from_pretrained(model_dir)

    def call(rows):  # no reference answers: no question is left out
        questions = [{"id": str(i), "question": r["question"], "context": r["context"]} for i, r in enumerate(rows)]
        windows = span_windows(tokenizer, questions, settings)
        answers = predict_answers(model, windows, questions, settings["max_answer_length"], batch_size, spans=True)
        counts = np.bincount(windows["example"], minlength=len(rows))
        return [(*answers[str(i)], int(counts[i])) for i in range(len(rows))]
    return call


def pipeline(args) -> dict:
    """answers/s over the dev rows as raw text, `--batch_size` at a time, one process
    (`answerer`), under `torch.inference_mode`, after one untimed pass."""
    dev = load_examples(os.path.join(args.inputs, "dev.jsonl"))
    call = answerer(settings_of(args.inputs), args.model_dir, args.batch_size)
    with torch.inference_mode():
        time_batches(call, dev, args.batch_size, 1)  # warm-up
        rates = time_batches(call, dev, args.batch_size, args.repeats)
    return {"answers_per_second": rates, "batch_size": args.batch_size, "rows": len(dev), "versions": versions()}


def outputs(args) -> dict:
    """What transformers answers for each dev row (`answerer`), for
    benchmarks.transformers_bridge to hold kerasbert's served answers to: the probability of
    every class by name; entities as [type, start, end, text]; [answer, start, end] and the
    context's window count."""
    dev = load_examples(os.path.join(args.inputs, "dev.jsonl"))
    kind = settings_of(args.inputs)["kind"]
    with torch.inference_mode():
        found = answerer(settings_of(args.inputs), args.model_dir, args.batch_size)(dev)
    if kind == "classes":
        rows = [{"probabilities": {s["label"]: float(s["score"]) for s in scores}} for scores in found]
    elif kind == "tags":
        texts = [" ".join(r["words"]) for r in dev]
        rows = [{"entities": [[e["entity_group"], int(e["start"]), int(e["end"]), text[e["start"]:e["end"]]]
                              for e in entities]} for text, entities in zip(texts, found)]
    else:
        rows = [{"answer": list(answer[:3]), "windows": answer[3]} for answer in found]
    return {"rows": rows, "versions": versions()}


def features(args) -> dict:
    """The encoder inputs and labels `train` builds of DIR/dev.jsonl with the tokenizer of
    `--model_dir` (tests/test_bench_tasks.py holds them to kerasbert's)."""
    settings = settings_of(args.inputs)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
    built = features_of(settings["kind"], tokenizer, load_examples(os.path.join(args.inputs, "dev.jsonl")), settings)
    return {key: built[key].tolist() for key in (*MODEL_INPUTS, *LABELS[settings["kind"]])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_tasks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("train")
    fit.add_argument("--checkpoint", required=True, help="MiniLM's Hugging Face folder.")
    speed = commands.add_parser("pipeline")
    speed.add_argument("--batch_size", type=int, default=32)
    speed.add_argument("--repeats", type=int, default=1)
    answers = commands.add_parser("outputs")
    answers.add_argument("--batch_size", type=int, default=32)
    commands.add_parser("features")
    for command in commands.choices.values():
        command.add_argument("--inputs", required=True, help="Folder with settings.json, train.jsonl, dev.jsonl.")
        command.add_argument("--model_dir", required=True, help="The fine-tuned model (train writes it).")
        command.add_argument("--output", required=True, help="Results JSON.")
    args = parser.parse_args(argv)
    run = {"train": train, "pipeline": pipeline, "outputs": outputs, "features": features}[args.command]
    write_json(args.output, run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
