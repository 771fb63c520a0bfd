"""One training step of a tiny model under the default strategy and under
MirroredStrategy over 2 logical CPU devices, for each KIND:OPTIMIZER given; prints the
results as one JSON list, in the order given.

Run as a fresh process (the CPU split must precede any TF work):
    python tests/mirrored_step.py multitask:sgd pretrainer:fused_adamw
"""

import json
import sys

from kerasbert.training.strategy import make_strategy

mirrored = make_strategy("mirrored", cpu_devices=2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerasbert.config import ModelConfig  # noqa: E402
from kerasbert.models.encoder import build_encoder  # noqa: E402
from kerasbert.finetuning.model import MultitaskBert  # noqa: E402
from kerasbert.models.pretrainer import BertPretrainer, pretraining_compile_args  # noqa: E402
from kerasbert.tasks import task_id  # noqa: E402
from kerasbert.training.optim import FusedAdamW, build_optimizer  # noqa: E402

BATCH, SEQ, K, VOCAB = 8, 12, 3, 30
rng = np.random.default_rng(0)
x = {
    "token_ids": rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32"),
    "segment_ids": np.repeat([[0] * 6 + [1] * 6], BATCH, 0).astype("int32"),
    "padding_mask": np.repeat([[1] * 10 + [0] * 2], BATCH, 0).astype("int32"),
    "mask_positions": rng.integers(1, 10, (BATCH, K)).astype("int32"),
}
y = {"mlm": rng.integers(5, VOCAB, (BATCH, K)).astype("int32"),
     "nsp": rng.integers(0, 2, BATCH).astype("int32")}
# Equal mask counts per half-batch, so per-replica means average to the global mean.
w = {"mlm": np.repeat([[1.0, 1.0, 0.0]], BATCH, 0).astype("float32"),
     "nsp": np.ones(BATCH, "float32")}
# One STS batch for a bi-encoder: both sentences, score labels.
x_sts = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
x_sts.update({"token_ids_b": np.roll(x["token_ids"], 1, axis=1), "segment_ids_b": x["segment_ids"] * 0,
              "padding_mask_b": x["padding_mask"], "task": np.full(BATCH, task_id("sts"), "int32")})
x_sts["segment_ids"] = x["segment_ids"] * 0
y_sts = rng.uniform(0, 5, BATCH).astype("float32")


def make_optimizer(optimizer):
    if optimizer == "fused_adamw":  # a large epsilon keeps Adam's first step smooth in the gradient
        # No clipnorm: keras clips each replica's gradient before the all-reduce.
        return FusedAdamW(0.5, epsilon=1.0, weight_decay=0.01)
    return keras.optimizers.SGD(0.5)


def one_step(strategy, initial_weights, kind, optimizer):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        config = ModelConfig(preset="custom", num_layers=1, hidden_dim=16, num_heads=2,
                             max_sequence_length=SEQ, dropout=0.0)
        if kind == "multitask":
            # Two tasks: a branch per task in the step, the batch's and an idle one.
            model = MultitaskBert(build_encoder(config, VOCAB), pair_encoder="bi", dropout=0.0,
                                  tasks=("sst", "sts"))
            model.compile(optimizer=make_optimizer(optimizer))
            model({k: v[:2] for k, v in x_sts.items()})  # build the heads
        else:
            model = BertPretrainer(build_encoder(config, VOCAB), mask_selection_length=K)
            model.compile(**pretraining_compile_args(model, make_optimizer(optimizer)))
        build_optimizer(model)  # as the pipelines do
    if initial_weights is not None:
        model.set_weights(initial_weights)
    start = model.get_weights()
    data = tf.data.Dataset.from_tensors((x_sts, y_sts) if kind == "multitask" else (x, y, w))
    history = model.fit(data, epochs=1, verbose=0)
    return start, history.history["loss"][0], model.get_weights()


def compare(kind, optimizer):
    start, loss_default, weights_default = one_step(tf.distribute.get_strategy(), None, kind, optimizer)
    _, loss_mirrored, weights_mirrored = one_step(mirrored, start, kind, optimizer)
    return {
        "case": f"{kind}:{optimizer}",
        "replicas": mirrored.num_replicas_in_sync,
        "loss_default": loss_default,
        "loss_mirrored": loss_mirrored,
        "max_weight_difference": max(float(np.max(np.abs(a - b)))
                                     for a, b in zip(weights_default, weights_mirrored)),
        "max_update": max(float(np.max(np.abs(a - b))) for a, b in zip(weights_default, start)),
    }


print(json.dumps([compare(*case.split(":")) for case in sys.argv[1:]]))
