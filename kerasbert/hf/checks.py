"""A transformers checkpoint's files checked before anything is built from them. keras-hub's
BertBackbone allocates whatever config.json asks for (vocab_size 120000000: 6 GB from a 1 KB
file; num_hidden_layers 100000: minutes of building), so each size it is given must be one the
files hold, read from the safetensors headers before any tensor is loaded.

What is checked (kerasbert/hf/checkpoint.py calls each), every refusal one DataError naming
the file and the key, tensor or token:
    check_config            config.json's sizes are positive integers, its heads divide
                            hidden_size, its dropouts are rates, id2label's keys are the ids
                            0..n-1 and num_labels, where given, their count
    shard_names             model.safetensors.index.json's weight_map names files inside the
                            checkpoint folder (plain relative names: no `/etc/passwd`, no `..`;
                            a symlink is followed, as the hub's cache links its files)
    stored_tensors          each tensor in one file only, where the index says it is
    check_shapes            each tensor the importer reads is there, of a float dtype and of the
                            shape config.json's sizes give; as many layers as num_hidden_layers;
                            the head as many rows as labels. Returns the names to load
    float32_weight          a tensor as float32, finite (NaN or inf refused, naming it)
    vocabulary_in_id_order  tokenizer.json's {token: id}: ids 0..n-1, each once
    check_vocabulary        each token one line of the run's vocabulary file, once, and no more
                            tokens than embeddings

Dtypes: F32 as it is; F16 and BF16 widened to float32 exactly and F64 rounded to it, as
transformers loads them into its float32 model (kerasbert's encoder computes in float32).
Integer, boolean and FP8 weights are refused, not converted: a weight stored so is a quantized
one (or no weight at all), whose values mean nothing without the scales it was quantized with.

Example:
    >>> check_config({"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": -1}, "config.json")
    Traceback (most recent call last):
    kerasbert.errors.DataError: config.json: num_hidden_layers is -1, not a positive integer
"""

from __future__ import annotations

import dataclasses
import io
import re

import numpy as np

from kerasbert.errors import DataError

# config.json's sizes, in the order they are checked (None: no default, the config must give it)
SIZES = (("vocab_size", None), ("hidden_size", None), ("num_hidden_layers", None), ("num_attention_heads", None),
         ("intermediate_size", None), ("max_position_embeddings", None), ("type_vocab_size", 2))
RATES = ("hidden_dropout_prob", "classifier_dropout")  # the dropouts the importer reads
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")  # safetensors' names of the dtypes read as float32
LAYER = re.compile(r"encoder\.layer\.(\d{1,9})\.")

EMBEDDINGS = {"embeddings.word_embeddings.weight": ("vocab_size", "hidden_size"),
              "embeddings.position_embeddings.weight": ("max_position_embeddings", "hidden_size"),
              "embeddings.token_type_embeddings.weight": ("type_vocab_size", "hidden_size"),
              "embeddings.LayerNorm.weight": ("hidden_size",), "embeddings.LayerNorm.bias": ("hidden_size",)}
# One encoder layer's dense layers: (out, in) of transformers' [out, in] Linear weights.
LAYER_DENSE = {"attention.self.query": ("hidden_size", "hidden_size"),
               "attention.self.key": ("hidden_size", "hidden_size"),
               "attention.self.value": ("hidden_size", "hidden_size"),
               "attention.output.dense": ("hidden_size", "hidden_size"),
               "intermediate.dense": ("intermediate_size", "hidden_size"),
               "output.dense": ("hidden_size", "intermediate_size")}
LAYER_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")
POOLER = {"pooler.dense.weight": ("hidden_size", "hidden_size"), "pooler.dense.bias": ("hidden_size",)}


@dataclasses.dataclass(frozen=True)
class StoredTensor:
    """One tensor as its safetensors header describes it (nothing loaded)."""

    file: str  # within the checkpoint folder
    key: str  # its name in the file (`bert.` prefixed, LayerNorm gamma/beta, as stored)
    dtype: str  # safetensors' dtype name: F32, F16, BF16, I8, ...
    shape: tuple[int, ...]


def shown(value, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters: a hostile file's values are echoed short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def json_kind(value) -> str:
    """What JSON calls the kind of a parsed value: 'an object', 'an array', 'a string', ..."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def label_count(config: dict) -> int:
    """How many labels the config declares (num_labels, else id2label's, else transformers' 2)."""
    return config.get("num_labels") or len(config.get("id2label") or {}) or 2


def check_config(config: dict, path: str) -> None:
    """config.json's values the importer reads, each of its kind and range."""
    for key, default in SIZES:
        value = config.get(key, default)
        if value is None:
            raise DataError(f"{path}: no {key} (a BERT config gives its sizes: {', '.join(k for k, _ in SIZES)})")
        if not _is_count(value):
            raise DataError(f"{path}: {key} is {shown(value)}, not a positive integer")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise DataError(f"{path}: hidden_size {config['hidden_size']} is not a multiple of num_attention_heads "
                        f"{config['num_attention_heads']} (each head reads an equal slice)")
    for key in RATES:
        value = config.get(key)
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                      and 0 <= value < 1):
            raise DataError(f"{path}: {key} is {shown(value)}, not a rate in [0, 1)")
    _check_labels(config, path)
    if "kerasbert_task" in config and not isinstance(config["kerasbert_task"], dict):
        raise DataError(f"{path}: kerasbert_task is {json_kind(config['kerasbert_task'])}, not an object")


def _check_labels(config: dict, path: str) -> None:
    id2label = config.get("id2label")
    if id2label is not None and not isinstance(id2label, dict):
        raise DataError(f"{path}: id2label is {json_kind(id2label)}, not an object of id: label")
    ids = set()
    for key in id2label or {}:
        try:
            index = int(key)
        except ValueError:
            raise DataError(f"{path}: id2label key {shown(key)} is not an integer id") from None
        if not 0 <= index < len(id2label) or index in ids:
            raise DataError(f"{path}: id2label's keys are not the ids 0-{len(id2label) - 1}, each once "
                            f"({shown(key)} is not)")
        ids.add(index)
    count = config.get("num_labels")
    if count is not None and not _is_count(count):
        raise DataError(f"{path}: num_labels is {shown(count)}, not a positive integer")
    if count is not None and ids and count != len(ids):
        raise DataError(f"{path}: num_labels is {count}, but id2label has {len(ids)} labels")


def _inside(name: str) -> bool:
    """A plain relative file name below the folder: no absolute path, `.` or `..` part."""
    return bool(name) and "\0" not in name and all(part not in ("", ".", "..") for part in name.split("/"))


def shard_names(index: dict, path: str) -> dict[str, str]:
    """model.safetensors.index.json's weight_map {tensor: file}, each file inside the folder."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        raise DataError(f"{path}: weight_map is {json_kind(weight_map)}, not an object of tensor: file")
    for file in weight_map.values():
        if not isinstance(file, str) or not _inside(file):
            raise DataError(f"{path}: shard {shown(file)} is not a file inside the checkpoint folder (a name such "
                            "as model-00001-of-00002.safetensors)")
    return weight_map


def stored_tensors(headers: list[tuple[str, str, str, list[int]]], weight_map: dict[str, str],
                   index_path: str, folder: str) -> dict[str, StoredTensor]:
    """{stored name: StoredTensor} of every header entry (file, key, dtype, shape), each tensor in
    one file only and in the file the index (if any) names."""
    stored = {}
    for file, key, dtype, shape in headers:
        if key in stored:
            raise DataError(f"{folder}/{file}: tensor {shown(key)} is also in {stored[key].file}")
        stored[key] = StoredTensor(file, key, dtype, tuple(shape))
    for key, file in weight_map.items():
        if key not in stored or stored[key].file != file:
            raise DataError(f"{index_path}: weight_map puts {shown(key)} in {file}, which does not hold it")
    return stored


def _layers_held(held: list[int]) -> str:
    if not held:
        return "none"
    if held == list(range(held[-1] + 1)):
        return f"encoder.layer.0-{held[-1]}"
    return "encoder.layer." + ",".join(map(str, held[:10])) + (",..." if len(held) > 10 else "")


def _expected_shapes(layers: int, pooler: bool) -> dict[str, tuple[str, ...]]:
    """The encoder's tensors (plain names) and their shapes as config.json's size keys."""
    shapes = dict(EMBEDDINGS)
    for i in range(layers):
        for dense, dims in LAYER_DENSE.items():
            shapes[f"encoder.layer.{i}.{dense}.weight"], shapes[f"encoder.layer.{i}.{dense}.bias"] = dims, dims[:1]
        for norm in LAYER_NORMS:
            shapes[f"encoder.layer.{i}.{norm}.weight"] = shapes[f"encoder.layer.{i}.{norm}.bias"] = ("hidden_size",)
    return {**shapes, **(POOLER if pooler else {})}


def check_shapes(folder: str, config: dict, stored: dict[str, StoredTensor], head: str) -> list[str]:
    """The plain names of the tensors the importer reads, once each is there, of a float dtype and
    of the shape config.json gives (`stored`: by plain name; `head`: the head's weight prefix)."""
    path = f"{folder}/config.json"
    layers = config["num_hidden_layers"]
    held = sorted({int(match.group(1)) for name in stored if (match := LAYER.match(name))})
    if held != list(range(layers)):
        raise DataError(f"{path}: num_hidden_layers is {layers}, but the weights hold {len(held)} layers "
                        f"({_layers_held(held)})")
    sizes = {key: config.get(key, default) for key, default in SIZES}
    expected = _expected_shapes(layers, pooler="pooler.dense.weight" in stored or "pooler.dense.bias" in stored)
    for name, dims in expected.items():
        if name not in stored:
            raise DataError(f"{folder}: weight {name} is missing from the checkpoint")
        tensor = stored[name]
        wrong = [key for key, have in zip(dims, tensor.shape) if sizes[key] != have]
        if wrong:
            raise DataError(f"{path}: {wrong[0]} is {sizes[wrong[0]]}, but weight {name} has shape {tensor.shape} in "
                            f"{tensor.file}")
        if len(tensor.shape) != len(dims):
            raise DataError(f"{folder}/{tensor.file}: weight {name} has shape {tensor.shape}; config.json's sizes give "
                            f"{tuple(sizes[key] for key in dims)}")
    head_names = _check_head(folder, config, stored, head)
    for name in (*expected, *head_names):
        if stored[name].dtype not in FLOAT_DTYPES:
            raise DataError(f"{folder}/{stored[name].file}: weight {name} is {stored[name].dtype}; kerasbert reads "
                            "float weights (F16, BF16 and F64 converted to float32), not quantized ones (their "
                            "values mean nothing without their scales)")
    return [*expected, *head_names]


def _check_head(folder: str, config: dict, stored: dict[str, StoredTensor], head: str) -> list[str]:
    """The head's weights are there, and as many rows as the config's labels (2 for QA)."""
    names = [f"{head}.weight", f"{head}.bias"]
    missing = [name for name in names if name not in stored]
    architecture = config["architectures"][0]
    if missing:
        raise DataError(f"{folder}: {architecture} without its head's weights {missing} (a checkpoint saved from the "
                        "task model, not its encoder, has them)")
    rows = 2 if head == "qa_outputs" else label_count(config)
    hidden = config["hidden_size"]
    weight, bias = stored[names[0]].shape, stored[names[1]].shape
    if weight != (rows, hidden) or bias != (rows,):
        what = "start and end" if head == "qa_outputs" else f"{rows} labels of id2label"
        raise DataError(f"{folder}: {head}.weight has shape {weight} and {head}.bias {bias}; the {what} need "
                        f"({rows}, {hidden}) and ({rows},)")
    return names


def float32_weight(path: str, name: str, array: np.ndarray) -> np.ndarray:
    """`array` as float32 (see the module's Dtypes), refused if any value is NaN or infinite."""
    with np.errstate(over="ignore"):  # F64 beyond float32's range: inf, refused below
        weight = array.astype(np.float32, copy=False)
    if not np.isfinite(weight).all():
        converted = " (as float32)" if array.dtype != np.float32 else ""
        raise DataError(f"{path}: weight {name} holds NaN or infinite values{converted}")
    return weight


def vocabulary_in_id_order(vocab, path: str) -> list[str]:
    """tokenizer.json's WordPiece {token: id} as tokens in id order: ids 0..n-1, each once (a gap
    or a repeat would shift every later id in the vocabulary file)."""
    if not isinstance(vocab, dict):
        raise DataError(f"{path}: model.vocab is {json_kind(vocab)}, not an object of token: id")
    for token, index in vocab.items():
        if not isinstance(index, int) or isinstance(index, bool):
            raise DataError(f"{path}: token {shown(token)} has id {shown(index)}, not an integer")
    missing = sorted(set(range(len(vocab))) - set(vocab.values()))
    if missing:
        raise DataError(f"{path}: model.vocab's ids are not 0-{len(vocab) - 1}, each once ({missing[0]} is missing)")
    return sorted(vocab, key=vocab.get)


def _as_vocabulary_lines(token: str) -> list[str]:
    """What keras-hub's WordPieceTokenizer reads back of `token` written as a vocabulary line
    (save_assets writes f"{token}\\n"; load_assets reads lines, universal newlines, rstrip())."""
    return [line.rstrip() for line in io.StringIO(token + "\n", newline=None)]


def check_vocabulary(vocabulary: list[str], path: str, vocab_size: int) -> None:
    """Each token reads back from the run's vocabulary file as itself, is there once, and has an
    embedding."""
    ids = {}
    for index, token in enumerate(vocabulary):
        if not token or _as_vocabulary_lines(token) != [token]:
            raise DataError(f"{path}: token {shown(token)} (id {index}) cannot be one line of the run's vocabulary "
                            "file (empty, a line break or trailing whitespace): every later id would shift")
        if token in ids:  # TF Text's FastWordpieceTokenizer, which serves the run, refuses a repeated token
            raise DataError(f"{path}: token {shown(token)} is both id {ids[token]} and id {index}; a WordPiece "
                            "vocabulary holds each token once")
        ids[token] = index
    if len(vocabulary) > vocab_size:
        raise DataError(f"{path}: {len(vocabulary)} tokens, more than config.json's vocab_size {vocab_size} (the "
                        f"ids past {vocab_size - 1} have no embedding)")
