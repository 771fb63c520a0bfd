"""Train fresh heads alone on a frozen pretrained encoder, before training everything.

A fresh head on a pretrained encoder sends back gradients that are noise at first, and
the first steps of training then pull the encoder away from what it learned. Linear
probing before fine-tuning avoids that (Kumar et al. 2022, "Fine-Tuning can Distort
Pretrained Features"). Pretraining uses it for a fresh MLM/NSP head, fine-tuning for
the task heads.

In a fit script (a sketch, not run: kerasbert/pretraining/run.py and finetuning/run.py call it):
    warm_up_heads(model, train_data, steps=100, learning_rate=1e-3,
                  compile_model=lambda optimizer: model.compile(optimizer=optimizer))
"""

from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf


def warm_up_heads(model: keras.Model, data: tf.data.Dataset, steps: int, learning_rate: float,
                  compile_model: Callable[[keras.optimizers.Optimizer], None],
                  verbose: int = 1) -> None:
    """Trains everything but `model.backbone` for `steps` steps at a constant rate (Adam).

    `compile_model(optimizer)` compiles `model` with its losses and metrics. Call in the
    strategy scope; compile the model again afterwards, with the backbone trainable again.
    Variables the backbone owns stay frozen even where a head uses them (a tied MLM
    output projection is the encoder's token embedding).
    """
    model.backbone.trainable = False
    try:
        compile_model(keras.optimizers.Adam(learning_rate, epsilon=1e-6))
        model.fit(data, epochs=1, steps_per_epoch=steps, verbose=verbose, shuffle=False)
    finally:
        model.backbone.trainable = True
