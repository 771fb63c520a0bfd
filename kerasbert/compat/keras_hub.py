"""Every use of keras-hub's private API in kerasbert, in one place, behind one version gate.

- `block_parts(block)`: the sub-layers of a `TransformerEncoder` (keras-hub keeps them in
  private attributes: `_self_attention_layer`, `_feedforward_intermediate_dense`, ...),
  which kerasbert/models/unpadded.py runs one by one over the real tokens only.
- `word_split_patterns()`: the regexes keras-hub's WordPiece tokenizer splits words with
  (module constants), which kerasbert/families/wordpiece.py reuses so that
  its ids equal `BertTokenizer`'s (tests/test_wordpiece.py checks them on the dev sets).
- `preset_config(preset)`: a preset's config.json, as keras-hub reads it (a local folder or a
  hub handle): a Keras preset's names its class, a Hugging Face folder's its `model_type`
  and `hidden_act`, which keras-hub's BERT converter leaves out (kerasbert/models/encoder.py).
- `convert_bert_weights(backbone, loader, config)`: keras-hub's transformers BERT converter
  (`keras_hub.src.utils.transformers.convert_bert`), which kerasbert/hf/importing.py feeds
  from its own reader of the checkpoint (tests/test_transformers_bridge.py).

On a keras-hub release not in CHECKED_KERAS_HUB, `checked()` is False and kerasbert runs
the encoder as the backbone's own call (the same results, with the padding computed);
tests/test_compat.py fails, so that an upgrade is a decision: check that the attributes
below still hold the layers they name and that tests/test_unpadded.py passes, then add the
release.

Example (`encoder`: a keras-hub BertBackbone):
    >>> checked()  # this keras-hub is one of CHECKED_KERAS_HUB
    True
    >>> parts = block_parts(encoder.transformer_layers[0])
    >>> parts.intermediate.units, parts.output.units  # (intermediate_dim, hidden_dim)
    (32, 8)
"""

from __future__ import annotations

import dataclasses

import keras
import keras_hub

CHECKED_KERAS_HUB = ("0.32.0",)  # the releases whose private attributes below were read and tested


def checked() -> bool:
    return keras_hub.__version__ in CHECKED_KERAS_HUB


@dataclasses.dataclass(frozen=True)
class BlockParts:
    """The layers of one post-LN transformer block, in the order they run."""

    attention: keras.layers.MultiHeadAttention
    attention_dropout: keras.layers.Dropout
    attention_norm: keras.layers.LayerNormalization
    intermediate: keras.layers.Dense  # with the block's activation
    output: keras.layers.Dense
    output_dropout: keras.layers.Dropout
    output_norm: keras.layers.LayerNormalization


def block_parts(block) -> BlockParts:
    """The sub-layers of a keras-hub `TransformerEncoder` block."""
    if block.normalize_first:
        raise ValueError(f"{block.name}: a pre-LN block (normalize_first=True); BERT's blocks are post-LN")
    return BlockParts(
        attention=block._self_attention_layer, attention_dropout=block._self_attention_dropout,
        attention_norm=block._self_attention_layer_norm, intermediate=block._feedforward_intermediate_dense,
        output=block._feedforward_output_dense, output_dropout=block._feedforward_dropout,
        output_norm=block._feedforward_layer_norm)


def word_split_patterns() -> tuple[str, str]:
    """keras-hub's RE2 patterns that split text into words before WordPiece (whitespace,
    control characters, punctuation, CJK characters) and the part of them kept as words
    (punctuation, CJK): its `BertTokenizer` splits with these, and
    kerasbert/families/wordpiece.py must split as it does."""
    from keras_hub.src.tokenizers import word_piece_tokenizer as tokenizer

    return tokenizer.WHITESPACE_PUNCTUATION_AND_CJK_REGEX, tokenizer.PUNCTUATION_AND_CJK_REGEX


def preset_config(preset: str) -> dict:
    """The config.json of a keras-hub preset (a folder or a handle), read as `from_preset` reads it."""
    from keras_hub.src.utils.preset_utils import CONFIG_FILE, load_json

    return load_json(preset, CONFIG_FILE)


def convert_bert_weights(backbone, loader, transformers_config: dict) -> None:
    """Assigns a transformers BERT checkpoint's encoder weights to `backbone` through keras-hub's
    own converter; `loader` answers its `get_tensor(name)` and `port_weight(variable, name, hook_fn)`."""
    from keras_hub.src.utils.transformers import convert_bert

    convert_bert.convert_weights(backbone, loader, transformers_config)
