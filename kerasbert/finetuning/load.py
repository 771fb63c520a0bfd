"""A pipelines.finetune output folder, loaded back: its config, model and preprocessor.

Example:
    >>> config, model, preprocessor = load_finetuned(run_dir)  # e.g. runs/finetune
    >>> model.tasks, config.heads.pair_encoder
    (('sst', 'para', 'sts'), 'cross')
"""

from __future__ import annotations

import os

import keras

from kerasbert.config import FinetuneConfig, load_config
from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.models.encoder import BertEncoder
from kerasbert.tokenization import load_tokenizer


def load_finetuned(model_dir: str):
    """(config, model, preprocessor) of a pipelines.finetune output folder.

    >>> import tensorflow as tf
    >>> config, model, pre = load_finetuned(run_dir)
    >>> model.embed(pre.pack(tf.constant(["a fine film"]))).shape  # MiniLM's: (1, 384); this tiny one's
    TensorShape([1, 8])
    """
    for name in ("config.json", "model.keras", "encoder"):
        if not os.path.exists(os.path.join(model_dir, name)):
            raise FileNotFoundError(f"{model_dir}: no {name}; --model_dir takes an output folder of "
                                    "pipelines.finetune")
    config = load_config(FinetuneConfig, os.path.join(model_dir, "config.json"))
    model = keras.models.load_model(os.path.join(model_dir, "model.keras"), compile=False,
                                    custom_objects={"kerasbert>MultitaskBert": MultitaskBert,
                                                    "kerasbert>BertEncoder": BertEncoder})
    preprocessor = TaskPreprocessor(load_tokenizer(os.path.join(model_dir, "encoder")),
                                    config.data.max_sequence_length, config.heads.pair_encoder, tasks=config.tasks)
    return config, model, preprocessor
