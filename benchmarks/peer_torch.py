"""The peer: Hugging Face `transformers` on PyTorch doing what kerasbert does, for
`benchmarks.peers`. It runs in `.venv-peer` and never imports kerasbert or TensorFlow;
inputs and results pass through files (benchmarks/peer_protocol.py).

    python -m benchmarks.peer_torch pretrain --inputs DIR --init INIT.npz [--state FILE] --output OUT.json
    python -m benchmarks.peer_torch pretrain_speed --inputs DIR --init INIT.npz --output OUT.json
    python -m benchmarks.peer_torch finetune_speed --checkpoint MINILM --batches B.npz --output OUT.json
    python -m benchmarks.peer_torch inference --checkpoint MINILM --sentences S.json --output OUT.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers

from benchmarks.peer_protocol import (batch, heldout_scores, load_rows, read_json, time_batches, time_embedding,
                                      write_json)


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


# --- Fine-tuning and inference on the MiniLM checkpoint --------------------------------

def finetune_speed(args) -> dict:
    """BertForSequenceClassification on the given packed batches: examples/s of whole steps
    (forward, loss, backward, clipping, AdamW)."""
    model = transformers.BertForSequenceClassification.from_pretrained(args.checkpoint, num_labels=args.num_labels)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01, eps=1e-6)
    constant = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    with np.load(args.batches) as data:
        count = len([name for name in data.files if name.startswith("labels_")])
        batches = [{name: torch.from_numpy(data[f"{name}_{i}"]).long()
                    for name in ("token_ids", "segment_ids", "padding_mask", "labels")} for i in range(count)]

    def step(b):
        out = model(input_ids=b["token_ids"], token_type_ids=b["segment_ids"], attention_mask=b["padding_mask"],
                    labels=b["labels"])
        update(model, optimizer, constant, out.loss, {"clipnorm": 1.0, "clip_scope": "global"})

    for b in batches[:args.warmup]:
        step(b)
    timed = batches[args.warmup:]
    rows_per_batch = sum(len(b["labels"]) for b in timed) / len(timed)
    batches_per_second = time_batches(lambda chunk: step(chunk[0]), timed, 1, args.repeats)
    return {"examples_per_second": [rate * rows_per_batch for rate in batches_per_second],
            "timed_batches": len(timed), "versions": versions()}


def inference(args) -> dict:
    """Raw text to sentence embeddings: the fast tokenizer, BertModel, mean pooling over
    the attention mask, under `torch.inference_mode`."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.checkpoint)
    model = transformers.BertModel.from_pretrained(args.checkpoint, add_pooling_layer=False)
    model.eval()

    @torch.inference_mode()
    def embed(texts):
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")
        states = model(**encoded).last_hidden_state  # (batch, seq, hidden)
        mask = encoded["attention_mask"][..., None].to(states.dtype)
        return ((states * mask).sum(1) / mask.sum(1).clamp(min=1.0)).numpy()

    embeddings, rates = time_embedding(embed, read_json(args.sentences), args.batch_size, args.repeats)
    np.save(args.output + ".embeddings.npy", embeddings)
    return {"sentences_per_second": rates, "versions": versions()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_torch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("pretrain", "pretrain_speed"):
        command = commands.add_parser(name)
        command.add_argument("--inputs", required=True, help="Folder with train.npz, heldout.npz, peer_config.json.")
        command.add_argument("--init", required=True, help="Initial weights (.npz, Hugging Face names).")
        command.add_argument("--seed", type=int, default=1234)
    commands.choices["pretrain"].add_argument(
        "--state", default="", help="Resume file: written after every block, resumed from when present.")
    commands.choices["pretrain_speed"].add_argument("--steps", type=int, default=20)
    finetune = commands.add_parser("finetune_speed")
    finetune.add_argument("--checkpoint", required=True)
    finetune.add_argument("--batches", required=True)
    finetune.add_argument("--num_labels", type=int, default=5)
    finetune.add_argument("--learning_rate", type=float, default=5e-5)
    infer = commands.add_parser("inference")
    infer.add_argument("--checkpoint", required=True)
    infer.add_argument("--sentences", required=True, help="A JSON list of strings.")
    infer.add_argument("--batch_size", type=int, default=32)
    infer.add_argument("--max_length", type=int, default=128)
    for name, command in commands.choices.items():
        if name != "pretrain":
            command.add_argument("--repeats", type=int, default=3)
        if name.endswith("_speed"):
            command.add_argument("--warmup", type=int, default=3)
        command.add_argument("--output", required=True, help="Results JSON.")
    args = parser.parse_args(argv)
    run = {"pretrain": pretrain, "pretrain_speed": pretrain_speed,
           "finetune_speed": finetune_speed, "inference": inference}[args.command]
    write_json(args.output, run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
