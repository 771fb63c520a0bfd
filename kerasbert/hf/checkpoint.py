"""A transformers BERT checkpoint folder, read and checked: its config, its weights (from
safetensors, sharded or not) under one naming, and its WordPiece tokenizer.

What is read, and refused with one DataError naming the folder:
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
        count = self.config.get("num_labels") or len(self.config.get("id2label") or {}) or 2
        id2label = {int(key): str(value) for key, value in (self.config.get("id2label") or {}).items()}
        return [id2label.get(index, f"LABEL_{index}") for index in range(count)]


def read_checkpoint(folder: str) -> TransformersCheckpoint:
    """The checkpoint in `folder` (a local folder, or a hub id where online: `hf://org/name`
    or `org/name` not found locally), checked; DataError says what is wrong with it."""
    folder = _local_folder(folder)
    config = _read_config(folder)
    weights = _read_weights(folder)
    vocabulary, lowercase, strip_accents = _read_tokenizer(folder)
    checkpoint = TransformersCheckpoint(folder, config, weights, vocabulary, lowercase, strip_accents)
    _check_head(checkpoint)
    return checkpoint


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
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None


def _read_config(folder: str) -> dict:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise DataError(f"{folder}: not a transformers checkpoint (no config.json)")
    config = _read_json(path)
    architecture = (config.get("architectures") or ["(none)"])[0]
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


def _read_weights(folder: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        files = sorted(set(_read_json(index).get("weight_map", {}).values()))
    elif os.path.isfile(os.path.join(folder, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        other = [name for name in ("pytorch_model.bin", "tf_model.h5") if os.path.isfile(os.path.join(folder, name))]
        raise DataError(f"{folder}: no model.safetensors (or model.safetensors.index.json)"
                        + (f"; {other[0]} is not read: save it with transformers' save_pretrained, which writes "
                           "safetensors" if other else ""))
    weights = {}
    for name in files:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise DataError(f"{folder}: shard {name} of model.safetensors.index.json is missing")
        try:
            tensors = load_file(path)
        except Exception as error:  # safetensors' own error for a damaged header or data
            raise DataError(f"{path}: not a readable safetensors file ({error})") from None
        weights.update({_plain_name(key): value for key, value in tensors.items()})
    return weights


def _plain_name(key: str) -> str:
    """`bert.encoder.layer.0.output.LayerNorm.gamma` -> `encoder.layer.0.output.LayerNorm.weight`."""
    key = key[len("bert."):] if key.startswith("bert.") else key
    if ".LayerNorm." in key:
        key = key.replace(".LayerNorm.gamma", ".LayerNorm.weight").replace(".LayerNorm.beta", ".LayerNorm.bias")
    return key


def _read_tokenizer(folder: str) -> tuple[list[str], bool, bool]:
    settings_path = os.path.join(folder, "tokenizer_config.json")
    settings = _read_json(settings_path) if os.path.isfile(settings_path) else {}
    tokenizer_class = settings.get("tokenizer_class") or "BertTokenizer"
    if not tokenizer_class.startswith("Bert"):
        raise DataError(f"{folder}: tokenizer {tokenizer_class}; kerasbert reads BERT's WordPiece tokenizer "
                        "(BertTokenizer, BertTokenizerFast)")
    lowercase = settings.get("do_lower_case", True)
    vocabulary_path, fast_path = os.path.join(folder, "vocab.txt"), os.path.join(folder, "tokenizer.json")
    if os.path.isfile(vocabulary_path):
        with open(vocabulary_path, encoding="utf-8") as f:
            vocabulary = [line.rstrip("\n") for line in f]
    elif os.path.isfile(fast_path):
        fast = _read_json(fast_path)
        model = fast.get("model") or {}
        if model.get("type") != "WordPiece":
            raise DataError(f"{fast_path}: a {model.get('type')} tokenizer; kerasbert reads WordPiece vocabularies")
        by_id = sorted(model["vocab"].items(), key=lambda item: item[1])
        vocabulary = [token for token, _ in by_id]
        lowercase = bool((fast.get("normalizer") or {}).get("lowercase", lowercase))
    else:
        raise DataError(f"{folder}: no tokenizer (vocab.txt, or tokenizer.json of a WordPiece model)")
    missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
    if missing:
        raise DataError(f"{folder}: the vocabulary lacks BERT's special token(s) {missing}")
    strip_accents = settings.get("strip_accents")
    return vocabulary, bool(lowercase), bool(lowercase if strip_accents is None else strip_accents)


def _check_head(checkpoint: TransformersCheckpoint) -> None:
    """The head's weights are there, and as many rows as the config's labels (2 for QA)."""
    head, weights = checkpoint.head_name, checkpoint.weights
    missing = [f"{head}.{part}" for part in ("weight", "bias") if f"{head}.{part}" not in weights]
    if missing:
        raise DataError(f"{checkpoint.folder}: {checkpoint.architecture} without its head's weights {missing} "
                        "(a checkpoint saved from the task model, not its encoder, has them)")
    rows = 2 if head == "qa_outputs" else len(checkpoint.labels())
    hidden = checkpoint.config["hidden_size"]
    if weights[f"{head}.weight"].shape != (rows, hidden) or weights[f"{head}.bias"].shape != (rows,):
        what = "start and end" if head == "qa_outputs" else f"{rows} labels of id2label"
        raise DataError(f"{checkpoint.folder}: {head}.weight has shape {weights[f'{head}.weight'].shape} and "
                        f"{head}.bias {weights[f'{head}.bias'].shape}; the {what} need ({rows}, {hidden}) and "
                        f"({rows},)")
