"""The peer: Hugging Face `transformers` on PyTorch doing what kerasbert does, for
`benchmarks.peers` (pretraining and its speed, fine-tuning speed) and `benchmarks.tasks` (MiniLM fine-tuned for named
entities as `run_ner.py`, extractive QA as `run_qa.py`, classes; raw text to answers). It runs
in `.venv-peer` and never imports kerasbert or TensorFlow; inputs and results pass through
files (benchmarks/peer_protocol.py).

    python -m benchmarks.peer_torch COMMAND --help    # each command's flags (COMMANDS), --output OUT.json

For the tasks, `DIR/settings.json` holds `kind` ("tags", "span" or "classes":
`BertForSequenceClassification` on `text` (and `text_b`), class index `label`, `class_names`), the
sequence length, batch size, steps (and steps per block), learning rate, warm-up steps, weight
decay and clipping; `DIR/train.jsonl` the training examples in training order (taken in turn,
epoch after epoch); `DIR/dev.jsonl` the examples scored. `train` writes the dev predictions after
each block to OUT.json's `block_predictions` (tags per word; {id: answer}; the last block's also
as `predictions`): benchmarks.tasks scores them with kerasbert's own scorers. A killed `train` or
`pretrain` resumes from its last finished block. Tagging and QA follow run_ner.py and run_qa.py
(`tag_features`, `span_windows`, `predict_answers`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers

from benchmarks.peer_protocol import batch, heldout_scores, load_examples, load_rows, read_json, time_batches, write_json

def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads()}


# --- Pretraining ---------------------------------------------------------------------

def pretraining_model(model_config: dict, init_path: str) -> transformers.BertForPreTraining:
    """BertForPreTraining of kerasbert's sizes, its weights loaded from `init_path`.

    Matched to keras-hub's BERT where the two libraries differ by default: the encoder's
    GELU is the tanh approximation (`gelu_new`); keras-hub's MaskedLMHead uses the exact
    GELU and a LayerNorm epsilon of 1e-5. The token embedding has no padding index:
    PyTorch's zeroes the [PAD] row's gradient from the lookup, and keras-hub's masker may
    put [PAD] at a real position as one of its random replacements.
    """
    sizes = {name: value for name, value in model_config.items() if name not in ("dropout", "mlm_head_layer_norm_eps")}
    config = transformers.BertConfig(**sizes, type_vocab_size=2, hidden_act="gelu_new", layer_norm_eps=1e-12,
                                     hidden_dropout_prob=model_config["dropout"],
                                     attention_probs_dropout_prob=model_config["dropout"])
    model = transformers.BertForPreTraining(config)
    transform = model.cls.predictions.transform
    transform.transform_act_fn = torch.nn.GELU()  # exact, as keras' "gelu"
    transform.LayerNorm.eps = model_config["mlm_head_layer_norm_eps"]
    model.bert.embeddings.word_embeddings.padding_idx = None
    load_weights(model, init_path)
    return model


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Every parameter from `path` (an .npz keyed by parameter name); nothing left over."""
    with np.load(path) as arrays:
        state = {name: torch.from_numpy(arrays[name].copy()) for name in arrays.files}
    parameters = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(set(parameters) - set(state))
    unused = sorted(set(state) - set(model.state_dict()))
    if missing or unused:
        raise ValueError(f"{path}: parameters without weights {missing}; weights without parameters {unused}")
    model.load_state_dict(state, strict=False)
    embeddings = model.get_input_embeddings().weight
    if model.get_output_embeddings().weight.data_ptr() != embeddings.data_ptr():
        raise ValueError("the MLM decoder is not tied to the token embedding")


def make_optimizer(model: torch.nn.Module, train: dict):
    """AdamW as kerasbert's: no weight decay on biases and LayerNorm parameters; linear
    warm-up to the peak, then linear decay to 0 (the first update at a rate of 0, as keras
    counts steps from 0)."""
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    ids = {id(p) for p in no_decay}
    decay = [p for p in model.parameters() if id(p) not in ids]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train["learning_rate"], betas=(0.9, 0.999), eps=train["epsilon"])
    warmup, total = train["warmup_steps"], train["total_steps"]

    def rate(step):
        return max(min(step / max(warmup, 1), (total - step) / max(total - warmup, 1)), 0.0)

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def update(model, optimizer, scheduler, loss, train: dict) -> float:
    """One optimizer step on `loss`, its gradients clipped as kerasbert's `train.clipnorm` and
    `train.clip_scope` say: each parameter's on its own (keras' `clipnorm`) or all together
    ("global"). Returns the loss."""
    loss.backward()
    parameters = [parameter for parameter in model.parameters() if parameter.grad is not None]
    if train["clipnorm"] and train["clip_scope"] == "global":
        torch.nn.utils.clip_grad_norm_(parameters, train["clipnorm"])
    elif train["clipnorm"]:
        for parameter in parameters:
            torch.nn.utils.clip_grad_norm_([parameter], train["clipnorm"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def forward(model, rows: dict):
    """(the model's outputs on `rows` of a batch file, the rows as tensors)."""
    t = {name: torch.from_numpy(np.ascontiguousarray(values)) for name, values in rows.items()}
    return model(input_ids=t["token_ids"].long(), token_type_ids=t["segment_ids"].long(),
                 attention_mask=t["padding_mask"].long()), t


def train_step(model, optimizer, scheduler, rows: dict, train: dict) -> float:
    """kerasbert's loss: MLM cross-entropy over the real masked slots (Hugging Face's labels:
    -100 elsewhere), plus the weighted NSP cross-entropy over the rows that have a pair."""
    out, t = forward(model, rows)
    labels = torch.full_like(t["token_ids"], -100, dtype=torch.long)
    real = t["mask_weights"] > 0
    rows_index = torch.arange(labels.shape[0])[:, None].expand_as(t["mask_positions"])
    labels[rows_index[real], t["mask_positions"][real].long()] = t["mask_ids"][real].long()
    vocab = out.prediction_logits.shape[-1]
    mlm = F.cross_entropy(out.prediction_logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)
    nsp_rows = t["nsp_weights"] > 0
    nsp = (F.cross_entropy(out.seq_relationship_logits[nsp_rows], t["nsp_labels"][nsp_rows].long())
           if bool(nsp_rows.any()) else torch.zeros(()))
    return update(model, optimizer, scheduler, mlm + train["nsp_loss_weight"] * nsp, train)


@torch.inference_mode()
def evaluate(model, heldout: dict, batch_size: int) -> dict:
    model.eval()
    mlm_logits, nsp_logits = [], []
    for step in range(-(-len(heldout["token_ids"]) // batch_size)):
        out, t = forward(model, batch(heldout, step, batch_size))
        positions = t["mask_positions"].long()[..., None].expand(-1, -1, out.prediction_logits.shape[-1])
        mlm_logits.append(torch.gather(out.prediction_logits, 1, positions).numpy())
        nsp_logits.append(out.seq_relationship_logits.numpy())
    model.train()
    return heldout_scores(np.concatenate(mlm_logits), np.concatenate(nsp_logits), heldout)


def training_setup(args):
    """The settings' `train` section, the model with the weights of `--init` in training
    mode, its AdamW and schedule, the batch rows."""
    settings = read_json(os.path.join(args.inputs, "peer_config.json"))
    torch.manual_seed(args.seed)
    model = pretraining_model(settings["model"], args.init)
    model.train()
    optimizer, scheduler = make_optimizer(model, settings["train"])
    return settings["train"], model, optimizer, scheduler, load_rows(os.path.join(args.inputs, "train.npz"))


def pretrain(args) -> dict:
    """Held-out scores before training and after every block; with `--state`, the state and
    the blocks so far are written after every block, and the run resumes from them."""
    train, model, optimizer, scheduler, rows = training_setup(args)
    heldout = load_rows(os.path.join(args.inputs, "heldout.npz"))
    steps, per_block, batch_size = train["total_steps"], train["steps_per_block"], train["batch_size"]
    if args.state and os.path.exists(args.state):
        blocks = restore_state(args.state, model, optimizer, scheduler)["blocks"]
        print(f"peer seed {args.seed}: resuming after step {blocks[-1]['step']} from {args.state}", flush=True)
    else:
        blocks = [{"step": 0, **evaluate(model, heldout, batch_size)}]
        print(f"peer seed {args.seed}: step 0 {blocks[0]}", flush=True)
    train_seconds, losses = blocks[-1].get("train_seconds", 0.0), []
    block_started = time.perf_counter()
    for step in range(blocks[-1]["step"], steps):
        losses.append(train_step(model, optimizer, scheduler, batch(rows, step, batch_size), train))
        if (step + 1) % per_block == 0 or step + 1 == steps:
            train_seconds += time.perf_counter() - block_started  # evaluation is not training time
            blocks.append({"step": step + 1, "train_loss": float(np.mean(losses)),
                           "train_seconds": train_seconds, **evaluate(model, heldout, batch_size)})
            losses = []
            print(f"peer seed {args.seed}: {blocks[-1]}", flush=True)
            if args.state:
                save_state(args.state, model, optimizer, scheduler, blocks=blocks)
                write_json(args.output, {"blocks": blocks, "complete": step + 1 == steps, "versions": versions()})
            block_started = time.perf_counter()
    if args.state and os.path.exists(args.state):
        os.remove(args.state)  # finished: the output holds every block
    return {"blocks": blocks, "complete": True, "versions": versions()}


def save_state(path: str, model, optimizer, scheduler, **progress) -> None:
    """The training state (weights, optimizer, schedule, RNG) and `progress`, written aside
    then renamed: a kill leaves the previous state whole."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(), **progress}, path + ".partial")
    os.replace(path + ".partial", path)


def restore_state(path: str, model, optimizer, scheduler) -> dict:
    """Loads `save_state`'s file into the model, optimizer, schedule and RNG; returns it."""
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    return state


def finetune_speed(args) -> dict:
    """BertForSequenceClassification (SST-5's 5 classes) on the packed batches of `--batches`:
    examples/s of whole steps (forward, loss, backward, clipping, AdamW as `--training` says),
    `--repeats` timings of the batches after the first `--warmup`, each after `--warmup` steps."""
    train = json.loads(args.training)
    model = transformers.BertForSequenceClassification.from_pretrained(args.checkpoint, num_labels=5)
    model.train()
    optimizer, scheduler = make_optimizer(model, {**train, "warmup_steps": 0})
    with np.load(args.batches) as data:
        count = len([name for name in data.files if name.startswith("labels_")])
        batches = [{name: torch.from_numpy(data[f"{name}_{i}"]).long()
                    for name in ("token_ids", "segment_ids", "padding_mask", "labels")} for i in range(count)]

    def step(b):
        out = model(input_ids=b["token_ids"], token_type_ids=b["segment_ids"], attention_mask=b["padding_mask"],
                    labels=b["labels"])
        update(model, optimizer, scheduler, out.loss, train)

    rates, timed = [], batches[args.warmup:]
    for _ in range(args.repeats):
        for b in batches[:args.warmup]:
            step(b)
        started = time.perf_counter()
        for b in timed:
            step(b)
        rates.append(sum(len(b["labels"]) for b in timed) / (time.perf_counter() - started))
    return {"examples_per_second": rates, "timed_batches": len(timed), "versions": versions()}


def pretrain_speed(args) -> dict:
    """Seconds per step over `--steps` steps after `--warmup` steps, `--repeats` times."""
    train, model, optimizer, scheduler, rows = training_setup(args)
    step_seconds = []
    for _ in range(args.repeats):
        for step in range(args.warmup):
            train_step(model, optimizer, scheduler, batch(rows, step, train["batch_size"]), train)
        started = time.perf_counter()
        for step in range(args.warmup, args.warmup + args.steps):
            train_step(model, optimizer, scheduler, batch(rows, step, train["batch_size"]), train)
        step_seconds.append((time.perf_counter() - started) / args.steps)
    return {"step_seconds": step_seconds, "versions": versions()}


N_BEST = 20  # run_qa.py's n_best_size


def settings_of(inputs: str) -> dict:
    return read_json(os.path.join(inputs, "settings.json"))


# --- Tasks: features ------------------------------------------------------------------

def tag_features(tokenizer, examples: list[dict], settings: dict) -> dict:
    """Padded encoder inputs, first-piece `labels` (-100 elsewhere) and, per row, each
    word's first-piece position (-1: cut off), as run_ner.py labels them."""
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
    `start_positions`/`end_positions` of the first answer (0 where the window lacks it).
    Packed as BERT's run_squad.py and kerasbert do ([CLS] question [SEP] window [SEP], the
    question cut to `max_query_length` pieces, windows `doc_stride` pieces apart): the fast
    tokenizer's overflowing windows, as run_qa.py's, its `stride` (an overlap) set to start them so."""
    length, stride = settings["sequence_length"], settings["doc_stride"]
    rows = {key: [] for key in (*MODEL_INPUTS, "example", "offsets", "start_positions", "end_positions")}
    for index, example in enumerate(examples):
        question = tokenizer(example["question"], add_special_tokens=False, return_offsets_mapping=True)
        kept = question["offset_mapping"][:settings["max_query_length"]]  # the pieces past it: cut from the text
        spans = tokenizer(example["context"], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        answer = example["answers"][0] if example.get("answers") else None
        inside = [i for i, (s, e) in enumerate(spans)
                  if answer and e > answer["start"] and s < answer["start"] + len(answer["text"])]
        if answer and not inside:
            continue  # the answer covers no piece: kerasbert skips it too
        offset = len(kept) + 2  # the first context piece's position
        windows = tokenizer(example["question"][:kept[-1][1]], example["context"], truncation="only_second",
                            max_length=length, stride=length - 1 - offset - stride, padding="max_length",
                            return_overflowing_tokens=True, return_offsets_mapping=True)
        for window, window_spans in enumerate(windows["offset_mapping"]):
            context = [span if part == 1 else None for span, part in zip(window_spans, windows.sequence_ids(window))]
            begin, pieces = window * stride, sum(span is not None for span in context)
            whole = inside and begin <= inside[0] and inside[-1] < begin + pieces  # the answer in this window
            for key in MODEL_INPUTS:
                rows[key].append(windows[key][window])
            rows["example"].append(index)
            rows["offsets"].append(context)
            rows["start_positions"].append(offset + inside[0] - begin if whole else 0)
            rows["end_positions"].append(offset + inside[-1] - begin if whole else 0)
    return {key: np.array(values, np.int64) if key != "offsets" else values for key, values in rows.items()}


MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
LABELS = {"tags": ("labels",), "span": ("start_positions", "end_positions"), "classes": ("labels",)}


def features_of(kind: str, tokenizer, examples: list[dict], settings: dict) -> dict:
    return {"tags": tag_features, "span": span_windows, "classes": class_features}[kind](tokenizer, examples, settings)


def model_of(kind: str, checkpoint: str, settings: dict):
    if kind == "span":
        return transformers.BertForQuestionAnswering.from_pretrained(checkpoint)
    names = settings["tag_names" if kind == "tags" else "class_names"]
    head = transformers.BertForTokenClassification if kind == "tags" else transformers.BertForSequenceClassification
    return head.from_pretrained(checkpoint, num_labels=len(names), id2label=dict(enumerate(names)),
                                label2id={name: i for i, name in enumerate(names)})


# --- Tasks: training and dev predictions ------------------------------------------------

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
    """run_qa.py's postprocessing over every window of each example (the N_BEST starts and ends
    of each, spans inside the context, end not before start, at most `max_answer_length` pieces,
    best start + end logit): {id: answer}, or with `spans` {id: (answer, start, end)}, its
    character offsets in the context."""
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


# --- Tasks: raw text to entities, answers or classes ------------------------------------

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


def classifier(args) -> dict:
    """MiniLM (`--checkpoint`) with a new sequence-classification head, saved to `--model_dir`: the
    encoder computing settings.json's `hidden_act`, `class_names` its labels; the head's weights
    seeded and drawn at scale 1 (not 0.02), so that the probabilities move with the encoder's
    smallest differences (benchmarks.transformers_parity imports it and compares)."""
    settings = settings_of(args.inputs)
    torch.manual_seed(0)
    names = settings["class_names"]
    model = transformers.BertForSequenceClassification.from_pretrained(
        args.checkpoint, hidden_act=settings["hidden_act"], num_labels=len(names),
        id2label=dict(enumerate(names)), label2id={name: i for i, name in enumerate(names)})
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
        model.classifier.bias.normal_(0.0, 1.0)
    model.save_pretrained(args.model_dir)
    transformers.AutoTokenizer.from_pretrained(args.checkpoint).save_pretrained(args.model_dir)
    return {"hidden_act": model.config.hidden_act, "versions": versions()}


def outputs(args) -> dict:
    """What transformers answers for each dev row (`answerer`), for
    benchmarks.tasks (parts in and out) to hold kerasbert's served answers to: the probability of
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


FLAGS = {  # flag: (type, default (None: required), help)
    "--inputs": (str, None, "Folder of the inputs: train.npz, heldout.npz, peer_config.json (pretraining); "
                            "settings.json, train.jsonl, dev.jsonl (tasks)."),
    "--init": (str, None, "Initial weights (.npz, Hugging Face names)."),
    "--seed": (int, 1234, "Seed of the pretraining run."),
    "--state": (str, "", "Resume file: written after every block, resumed from when present."),
    "--steps": (int, 20, "Timed steps per repeat."),
    "--warmup": (int, 3, "Untimed steps before each timing."),
    "--repeats": (int, 1, "Timed passes."),
    "--checkpoint": (str, None, "MiniLM's Hugging Face folder."),
    "--batches": (str, None, "Packed batches (.npz: token_ids_I, segment_ids_I, padding_mask_I, labels_I)."),
    "--training": (str, None, "The optimizer's settings, JSON (benchmarks.results.peer_training)."),
    "--batch_size": (int, 32, "Rows a call."),
    "--model_dir": (str, None, "The fine-tuned model (train writes it; features reads its tokenizer)."),
    "--output": (str, None, "Results JSON."),
}
COMMANDS = {
    "pretrain": (pretrain, ("--inputs", "--init", "--seed", "--state")),
    "pretrain_speed": (pretrain_speed, ("--inputs", "--init", "--seed", "--steps", "--warmup", "--repeats")),
    "finetune_speed": (finetune_speed, ("--checkpoint", "--batches", "--warmup", "--repeats", "--training")),
    "train": (train, ("--inputs", "--checkpoint", "--model_dir")),
    "pipeline": (pipeline, ("--inputs", "--model_dir", "--batch_size", "--repeats")),
    "outputs": (outputs, ("--inputs", "--model_dir", "--batch_size")),
    "classifier": (classifier, ("--inputs", "--checkpoint", "--model_dir")),
    "features": (features, ("--inputs", "--model_dir")),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_torch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (_, flags) in COMMANDS.items():
        command = commands.add_parser(name)
        for flag in (*flags, "--output"):
            kind, default, text = FLAGS[flag]
            command.add_argument(flag, type=kind, default=default, required=default is None, help=text)
    args = parser.parse_args(argv)
    write_json(args.output, COMMANDS[args.command][0](args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
