"""Tiny transformers BERT checkpoint folders (config.json, safetensors weights, vocab.txt) written
with NumPy, for tests/test_transformers_bridge.py and the docstring examples (../conftest.py):
no transformers or PyTorch needed."""

import json
import os

import numpy as np
from safetensors.numpy import save_file

from tests.tiny_data import TINY_VOCAB

HIDDEN, LAYERS, HEADS, INTERMEDIATE, POSITIONS = 16, 2, 2, 32, 128
TAGS = ["B-PER", "O", "I-PER", "B-LOC", "I-LOC"]  # 'O' not first: the importer reorders the rows


def _rng_weights(seed: int, head: str | None, rows: int, pooler: bool, prefix: str, norm: str) -> dict:
    """A BertFor... state dict in transformers' names ([out, in] Linear weights), distinct values."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.3):
        return rng.normal(0.0, scale, shape).astype(np.float32)

    gamma, beta = ("gamma", "beta") if norm == "gamma" else ("weight", "bias")
    weights = {"embeddings.word_embeddings.weight": normal(len(TINY_VOCAB), HIDDEN),
               "embeddings.position_embeddings.weight": normal(POSITIONS, HIDDEN),
               "embeddings.token_type_embeddings.weight": normal(2, HIDDEN),
               f"embeddings.LayerNorm.{gamma}": 1 + normal(HIDDEN, scale=0.1),
               f"embeddings.LayerNorm.{beta}": normal(HIDDEN, scale=0.1)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name, (out, inp) in {"attention.self.query": (HIDDEN, HIDDEN), "attention.self.key": (HIDDEN, HIDDEN),
                                 "attention.self.value": (HIDDEN, HIDDEN), "attention.output.dense": (HIDDEN, HIDDEN),
                                 "intermediate.dense": (INTERMEDIATE, HIDDEN),
                                 "output.dense": (HIDDEN, INTERMEDIATE)}.items():
            weights[f"{p}{name}.weight"], weights[f"{p}{name}.bias"] = normal(out, inp), normal(out, scale=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{p}{name}.{gamma}"] = 1 + normal(HIDDEN, scale=0.1)
            weights[f"{p}{name}.{beta}"] = normal(HIDDEN, scale=0.1)
    if pooler:
        weights["pooler.dense.weight"], weights["pooler.dense.bias"] = normal(HIDDEN, HIDDEN), normal(HIDDEN)
    weights = {prefix + key: value for key, value in weights.items()}
    if head:
        weights[f"{head}.weight"], weights[f"{head}.bias"] = normal(rows, HIDDEN, scale=1.0), normal(rows)
    return weights


def write_checkpoint(folder, architecture, labels=None, seed=0, prefix="bert.", norm="weight", shards=1,
                     problem_type=None, pooler=True, lowercase=True, hidden_act="gelu"):
    """A tiny transformers checkpoint folder; returns its weights under plain names."""
    os.makedirs(folder, exist_ok=True)
    head = "qa_outputs" if architecture == "BertForQuestionAnswering" else "classifier"
    rows = 2 if head == "qa_outputs" else len(labels)
    weights = _rng_weights(seed, head, rows, pooler, prefix, norm)
    config = {"architectures": [architecture], "model_type": "bert", "vocab_size": len(TINY_VOCAB),
              "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "intermediate_size": INTERMEDIATE, "hidden_act": hidden_act, "max_position_embeddings": POSITIONS,
              "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1}
    if labels and head == "classifier":
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        config["label2id"] = {label: i for i, label in enumerate(labels)}
    if problem_type:
        config["problem_type"] = problem_type
    names = sorted(weights)
    if shards == 1:
        save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for shard in range(shards):
            file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
            part = {name: weights[name] for name in names[shard::shards]}
            save_file(part, os.path.join(folder, file), metadata={"format": "pt"})
            weight_map.update({name: file for name in part})
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(TINY_VOCAB) + "\n")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": lowercase, "tokenizer_class": "BertTokenizer"}, f)
    plain = {}
    for key, value in weights.items():
        key = key[len(prefix):] if key.startswith(prefix) else key
        plain[key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")] = value
    return plain
