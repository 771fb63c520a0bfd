"""The embedding bench's peer (`benchmarks.embedding`): sentence-transformers on PyTorch, run in
.venv-peer (no kerasbert, no TensorFlow). It embeds texts with a checkpoint as it is, or after its
own `SentenceTransformer.fit` on the bench's pairs; the bench scores every side's embeddings alike.

    python -m benchmarks.peer_sbert embed --checkpoint DIR --texts texts.json --output out.npy
    python -m benchmarks.peer_sbert train --checkpoint DIR --pairs train.jsonl --loss cosine \\
        --steps 360 --batch_size 16 --learning_rate 2e-5 --warmup_steps 36 --seed 1 \\
        --texts texts.json --output out.npy

Pairs are JSON Lines `{"text_a", "text_b"[, "label"]}` in training order (the bench shuffles them
by the seed). Losses: cosine (CosineSimilarityLoss: cos(u, v) regressed to label / `--max_score`),
cosent (CoSENTLoss on the label), mnrl (MultipleNegativesRankingLoss, scale 20; the label unread).
`fit` runs SentenceTransformerTrainer with its own seed (42): a seed here changes the pairs' order
only. Embeddings are L2-normalised, float32 (texts, hidden), written with numpy.save.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def load_model(checkpoint: str, max_length: int):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(checkpoint, device="cpu")
    model.max_seq_length = max_length
    return model


def embed(model, texts: list[str]) -> np.ndarray:
    return model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False).astype(np.float32)


def loss_of(model, name: str):
    from sentence_transformers.sentence_transformer import losses

    return {"cosine": losses.CosineSimilarityLoss, "cosent": losses.CoSENTLoss,
            "mnrl": losses.MultipleNegativesRankingLoss}[name](model)


def train(model, pairs: list[dict], args) -> None:
    """`SentenceTransformer.fit` over `pairs` in their order, `args.steps` steps of `args.batch_size`,
    AdamW (weight decay 0.01, global clip 1) with linear warmup and decay: fit's defaults, as kerasbert's."""
    import torch
    from sentence_transformers import InputExample
    from torch.utils.data import DataLoader

    torch.manual_seed(args.seed)
    if args.loss == "mnrl":
        examples = [InputExample(texts=[p["text_a"], p["text_b"]]) for p in pairs]
    else:
        scale = args.max_score if args.loss == "cosine" else 1.0
        examples = [InputExample(texts=[p["text_a"], p["text_b"]], label=float(p["label"]) / scale) for p in pairs]
    loader = DataLoader(examples, batch_size=args.batch_size, shuffle=False)
    model.fit(train_objectives=[(loader, loss_of(model, args.loss))], epochs=1, steps_per_epoch=args.steps,
              warmup_steps=args.warmup_steps, optimizer_params={"lr": args.learning_rate}, weight_decay=0.01,
              max_grad_norm=1.0, show_progress_bar=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_sbert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("embed", "train"))
    parser.add_argument("--checkpoint", required=True, help="A sentence-transformers folder.")
    parser.add_argument("--texts", required=True, help="A JSON list of the texts to embed.")
    parser.add_argument("--output", required=True, help="The embeddings' .npy file.")
    parser.add_argument("--max_length", type=int, default=128, help="Tokens a text keeps.")
    parser.add_argument("--pairs", help="train: the training pairs (JSON Lines).")
    parser.add_argument("--loss", choices=("cosine", "cosent", "mnrl"), default="cosine")
    parser.add_argument("--max_score", type=float, default=5.0, help="cosine: the label that means cos 1.")
    parser.add_argument("--steps", type=int, default=360)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--warmup_steps", type=int, default=36)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's threads (2 beside ~24 other processes: 20 steps of 16 pairs took 1,011 s)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    model = load_model(args.checkpoint, args.max_length)
    if args.command == "train":
        with open(args.pairs, encoding="utf-8") as f:
            train(model, [json.loads(line) for line in f], args)
    with open(args.texts, encoding="utf-8") as f:
        texts = json.load(f)
    np.save(args.output + ".partial.npy", embed(model, texts))
    os.replace(args.output + ".partial.npy", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
