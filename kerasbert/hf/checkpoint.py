"""A transformers BERT checkpoint folder, read and checked: its config, its weights (from
safetensors, sharded or not) under one naming, and its WordPiece tokenizer.

What is read, and refused with one DataError naming the folder (and, as kerasbert/hf/checks.py
says, whatever the files cannot fill: sizes, shards, dtypes, NaNs, tokens):
    config.json                 model_type "bert" and one of ARCHITECTURES (RoBERTa, DistilBERT,
                                ... and a bare BertModel are refused, naming what is supported);
                                hidden_act a GELU: "gelu" (exact) or its tanh approximation
    model.safetensors           or model.safetensors.index.json and its shards (a PyTorch-only
                                pytorch_model.bin is refused: transformers' save_pretrained
                                writes safetensors by default)
    vocab.txt                   or tokenizer.json of a WordPiece model; tokenizer_config.json's
                                do_lower_case and strip_accents
Weight names are transformers' with the `bert.` prefix taken off and LayerNorm's old
`gamma`/`beta` read as `weight`/`bias`, so `weights["embeddings.LayerNorm.weight"]` holds
whichever the file has.

Example:
    >>> checkpoint = read_checkpoint(hf_checkpoint)  # e.g. runs/hf/bert-sst2
    >>> checkpoint.architecture, checkpoint.weights["classifier.weight"].shape  # bert-base's: (2, 768)
    ('BertForSequenceClassification', (2, 16))
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from kerasbert.errors import DataError
from kerasbert.hf import checks
from kerasbert.models.encoder import transformers_activation

ARCHITECTURES = ("BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering")
# Each head's weights, and how many rows its weight has (from the config).
HEAD_WEIGHTS = {"BertForSequenceClassification": "classifier", "BertForTokenClassification": "classifier",
                "BertForQuestionAnswering": "qa_outputs"}
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclasses.dataclass(frozen=True)
class TransformersCheckpoint:
    """A checked transformers BERT checkpoint: what the importer builds a run from."""

    folder: str
    config: dict  # config.json
    weights: dict[str, np.ndarray]  # transformers' names without `bert.`, LayerNorm weight/bias
    vocabulary: list[str]
    lowercase: bool
    strip_accents: bool

    @property
    def architecture(self) -> str:
        return self.config["architectures"][0]

    @property
    def head_name(self) -> str:
        return HEAD_WEIGHTS[self.architecture]

    @property
    def activation(self) -> str:
        """The encoder activation (BertEncoder's name) of config.json's hidden_act (transformers' default "gelu")."""
        return transformers_activation(self.config.get("hidden_act", "gelu"), self.folder)

    def labels(self) -> list[str]:
        """id2label's names in id order (transformers' LABEL_i where the config has none)."""
        id2label = {int(key): str(value) for key, value in (self.config.get("id2label") or {}).items()}
        return [id2label.get(index, f"LABEL_{index}") for index in range(checks.label_count(self.config))]


def read_checkpoint(folder: str) -> TransformersCheckpoint:
    """The checkpoint in `folder` (a local folder, or a hub id where online: `hf://org/name`
    or `org/name` not found locally), checked; DataError says what is wrong with it."""
    folder = _local_folder(folder)
    config = _read_config(folder)
    checks.check_config(config, os.path.join(folder, "config.json"))
    stored = _stored_tensors(folder)  # from the safetensors headers: nothing loaded yet
    names = checks.check_shapes(folder, config, stored, HEAD_WEIGHTS[config["architectures"][0]])
    vocabulary, lowercase, strip_accents = _read_tokenizer(folder, config["vocab_size"])
    weights = _read_weights(folder, {name: stored[name] for name in names})
    return TransformersCheckpoint(folder, config, weights, vocabulary, lowercase, strip_accents)


def _local_folder(folder: str) -> str:
    if os.path.isdir(folder):
        return folder
    handle = folder[len("hf://"):] if folder.startswith("hf://") else folder
    if handle.count("/") != 1 or os.path.exists(handle):
        raise DataError(f"{folder}: not a folder (a transformers checkpoint is a folder with config.json, "
                        "model.safetensors and vocab.txt, or a hub id such as hf://org/name)")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(handle, allow_patterns=["*.json", "*.txt", "*.safetensors"])
    except Exception as error:  # offline, unknown id, no huggingface_hub: one line saying which
        raise DataError(f"{folder}: not a local folder, and the hub did not give it ({type(error).__name__}: "
                        f"{error})") from None


def _read_json(path: str) -> dict:
    """A JSON file's object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except ValueError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise DataError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: {checks.json_kind(value)} in JSON, not an object")
    return value


def _read_config(folder: str) -> dict:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise DataError(f"{folder}: not a transformers checkpoint (no config.json)")
    config = _read_json(path)
    architectures = config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else "(none)"
    supported = f"kerasbert imports BERT checkpoints with a task head: {', '.join(ARCHITECTURES)}"
    if config.get("model_type") != "bert":
        raise DataError(f"{folder}: a {config.get('model_type')!r} checkpoint ({architecture}); {supported}")
    if architecture not in ARCHITECTURES:
        raise DataError(f"{folder}: architecture {architecture}; {supported}")
    transformers_activation(config.get("hidden_act", "gelu"), folder)  # a GELU, or one line saying not
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise DataError(f"{folder}: position_embedding_type {config['position_embedding_type']!r}; kerasbert's "
                        "encoder has absolute positions only")
    if config.get("problem_type") == "multi_label_classification":
        raise DataError(f"{folder}: problem_type multi_label_classification (a sigmoid per label); kerasbert's "
                        "classifiers pick one class (single_label_classification) or regress one score")
    return config


def _stored_tensors(folder: str) -> dict[str, checks.StoredTensor]:
    """Every tensor of the checkpoint's safetensors files by plain name, as their headers say."""
    from safetensors import safe_open

    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        weight_map = checks.shard_names(_read_json(index), index)
        files = sorted(set(weight_map.values()))
    elif os.path.isfile(os.path.join(folder, "model.safetensors")):
        weight_map, files = {}, ["model.safetensors"]
    else:
        other = [name for name in ("pytorch_model.bin", "tf_model.h5") if os.path.isfile(os.path.join(folder, name))]
        raise DataError(f"{folder}: no model.safetensors (or model.safetensors.index.json)"
                        + (f"; {other[0]} is not read: save it with transformers' save_pretrained, which writes "
                           "safetensors" if other else ""))
    headers = []
    for name in files:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise DataError(f"{folder}: shard {name} of model.safetensors.index.json is missing")
        try:
            with safe_open(path, "numpy") as f:
                headers += [(name, key, f.get_slice(key).get_dtype(), f.get_slice(key).get_shape()) for key in f.keys()]
        except Exception as error:  # safetensors' own error for a damaged header
            raise DataError(f"{path}: not a readable safetensors file ({error})") from None
    stored = checks.stored_tensors(headers, weight_map, index, folder)
    plain = {}
    for key, tensor in stored.items():
        name = _plain_name(key)
        if name in plain:
            raise DataError(f"{folder}: tensors {plain[name].key} and {key} are both read as {name}")
        plain[name] = tensor
    return plain


def _read_weights(folder: str, stored: dict[str, checks.StoredTensor]) -> dict[str, np.ndarray]:
    """The tensors `stored` names (plain name: where), loaded as finite float32."""
    from safetensors import safe_open

    weights = {}
    for file in sorted({tensor.file for tensor in stored.values()}):
        path = os.path.join(folder, file)
        with safe_open(path, "numpy") as f:
            for name, tensor in stored.items():
                if tensor.file == file:
                    weights[name] = checks.float32_weight(path, name, f.get_tensor(tensor.key))
    return weights


def _plain_name(key: str) -> str:
    """`bert.encoder.layer.0.output.LayerNorm.gamma` -> `encoder.layer.0.output.LayerNorm.weight`."""
    key = key[len("bert."):] if key.startswith("bert.") else key
    if ".LayerNorm." in key:
        key = key.replace(".LayerNorm.gamma", ".LayerNorm.weight").replace(".LayerNorm.beta", ".LayerNorm.bias")
    return key


def _read_tokenizer(folder: str, vocab_size: int) -> tuple[list[str], bool, bool]:
    settings_path = os.path.join(folder, "tokenizer_config.json")
    settings = _read_json(settings_path) if os.path.isfile(settings_path) else {}
    tokenizer_class = settings.get("tokenizer_class") or "BertTokenizer"
    if not isinstance(tokenizer_class, str) or not tokenizer_class.startswith("Bert"):
        raise DataError(f"{folder}: tokenizer {tokenizer_class}; kerasbert reads BERT's WordPiece tokenizer "
                        "(BertTokenizer, BertTokenizerFast)")
    lowercase = settings.get("do_lower_case", True)
    vocabulary_path, fast_path = os.path.join(folder, "vocab.txt"), os.path.join(folder, "tokenizer.json")
    if os.path.isfile(vocabulary_path):
        with open(vocabulary_path, encoding="utf-8") as f:
            vocabulary = [line.rstrip("\n") for line in f]
        checks.check_vocabulary(vocabulary, vocabulary_path, vocab_size)
    elif os.path.isfile(fast_path):
        fast = _read_json(fast_path)
        model = fast.get("model") if isinstance(fast.get("model"), dict) else {}
        if model.get("type") != "WordPiece":
            raise DataError(f"{fast_path}: a {str(model.get('type'))[:80]} tokenizer; kerasbert reads WordPiece "
                            "vocabularies")
        vocabulary = checks.vocabulary_in_id_order(model.get("vocab"), fast_path)
        checks.check_vocabulary(vocabulary, fast_path, vocab_size)
        normalizer = fast.get("normalizer")
        lowercase = bool(normalizer.get("lowercase", lowercase) if isinstance(normalizer, dict) else lowercase)
    else:
        raise DataError(f"{folder}: no tokenizer (vocab.txt, or tokenizer.json of a WordPiece model)")
    missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
    if missing:
        raise DataError(f"{folder}: the vocabulary lacks BERT's special token(s) {missing}")
    strip_accents = settings.get("strip_accents")
    return vocabulary, bool(lowercase), bool(lowercase if strip_accents is None else strip_accents)
