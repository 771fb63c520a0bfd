"""A kerasbert run out as transformers folders: one per task, which `transformers.pipeline`
and `AutoModelFor...from_pretrained` load as they are.

Each folder holds config.json (architectures, id2label/label2id from the task's names),
model.safetensors (transformers' weight names, `bert.` prefix, the shared encoder copied into
each), vocab.txt, tokenizer_config.json (do_lower_case, strip_accents, model_max_length: the
encoder's max positions, 512 for MiniLM; kerasbert's signatures cut a text at the run's packed
length, transformers' pipeline reads up to model_max_length and cuts there with
truncation=True) and special_tokens_map.json. By the task's kind (its family's
`architecture`, `transformers_head`, `transformers_labels`, `head_to_transformers`):

    classes, pair_classes  BertForSequenceClassification, one label per class
    pair_binary            BertForSequenceClassification, 2 labels: (0, z) rows, so transformers'
                           softmax gives kerasbert's sigmoid(z) to the second class exactly
    score, pair_score      BertForSequenceClassification, num_labels 1, problem_type regression.
                           score_output "linear" (an imported regression) is exact; kerasbert's
                           own "sigmoid" head is not linear: transformers' logit z is kerasbert's
                           before min_score + (max_score - min_score) * sigmoid(z), clipped
    tags                   BertForTokenClassification (no pooler, as transformers builds it)
    span                   BertForQuestionAnswering, qa_outputs rows start, end
Sentence heads must read the [CLS] pooler (heads.pooling "cls") through a cross-encoder, as
transformers' do: a run with mean pooling, or a bi-encoder pair head, is refused naming the
task. hidden_act is the activation the encoder computes ("gelu" for an exact-GELU
`BertEncoder`, "gelu_new" for the tanh one), so transformers gives kerasbert's outputs (to
float rounding). config.json also carries the
task's declaration (`kerasbert_task`), which `load_transformers` reads back.

Example:
    >>> folders = export_transformers(run_dir, f"{tmp_path}/hf_models/run")  # e.g. runs/finetune
    >>> sorted(folders), sorted(os.listdir(folders["sst"]))
    (['para', 'sst', 'sts'], ['config.json', 'model.safetensors', 'special_tokens_map.json', 'tokenizer_config.json', 'vocab.txt'])
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import numpy as np

from kerasbert.compat.keras_hub import block_parts
from kerasbert.durable import publish
from kerasbert.errors import ConfigError
from kerasbert.finetuning.load import load_finetuned
from kerasbert.models.encoder import activation_of
from kerasbert.tasks import Task

log = logging.getLogger(__name__)
HIDDEN_ACT = {"gelu": "gelu", "gelu_approximate": "gelu_new"}  # transformers' name of each encoder activation


def encoder_weights(backbone, pooler: bool) -> dict[str, np.ndarray]:
    """The encoder's weights under transformers' BertModel names (`bert.` prefix); Dense kernels
    (in, out) become Linear weights (out, in)."""
    hidden = backbone.hidden_dim
    weights = {
        "embeddings.word_embeddings.weight": backbone.get_layer("token_embedding").embeddings,
        "embeddings.position_embeddings.weight": backbone.get_layer("position_embedding").position_embeddings,
        "embeddings.token_type_embeddings.weight": backbone.get_layer("segment_embedding").embeddings,
    }
    weights.update(layer_norm("embeddings.LayerNorm", backbone.get_layer("embeddings_layer_norm")))
    for i in range(backbone.num_layers):
        parts, prefix = block_parts(backbone.get_layer(f"transformer_layer_{i}")), f"encoder.layer.{i}."
        attention = parts.attention
        for name, dense in (("query", attention.query_dense), ("key", attention.key_dense),
                            ("value", attention.value_dense)):
            weights[f"{prefix}attention.self.{name}.weight"] = np.reshape(dense.kernel, (hidden, hidden)).T
            weights[f"{prefix}attention.self.{name}.bias"] = np.reshape(dense.bias, (hidden,))
        weights[f"{prefix}attention.output.dense.weight"] = np.reshape(attention.output_dense.kernel,
                                                                       (hidden, hidden)).T  # (heads, dim, hidden)
        weights[f"{prefix}attention.output.dense.bias"] = attention.output_dense.bias
        weights.update(layer_norm(f"{prefix}attention.output.LayerNorm", parts.attention_norm))
        weights.update(linear(f"{prefix}intermediate.dense", parts.intermediate))
        weights.update(linear(f"{prefix}output.dense", parts.output))
        weights.update(layer_norm(f"{prefix}output.LayerNorm", parts.output_norm))
    if pooler:
        weights.update(linear("pooler.dense", backbone.get_layer("pooled_dense")))
    return {f"bert.{name}": np.asarray(value) for name, value in weights.items()}


def pretrainer_weights(model) -> dict[str, np.ndarray]:
    """A BertPretrainer's weights under transformers' `BertForPreTraining` names: the encoder's
    (`encoder_weights`, with the pooler), the MLM head's (`cls.predictions`, its decoder tied to
    the token embedding) and the NSP head's (`cls.seq_relationship`), as float32 arrays.
    benchmarks.peers starts transformers from kerasbert's initial weights with them.

    Example:
        >>> from kerasbert.models.pretrainer import BertPretrainer
        >>> weights = pretrainer_weights(BertPretrainer(encoder, mask_selection_length=4))
        >>> weights["cls.seq_relationship.weight"].shape, weights["cls.predictions.decoder.weight"].shape
        ((2, 8), (15, 8))
    """
    variables = {variable.path: np.asarray(variable) for variable in model.weights}
    mlm_bias = variables["mlm_head/output_bias"]
    weights = {
        **encoder_weights(model.backbone, pooler=True),
        "cls.predictions.decoder.weight": variables["token_embedding/embeddings"],  # tied
        "cls.predictions.bias": mlm_bias, "cls.predictions.decoder.bias": mlm_bias,
        "cls.predictions.transform.dense.weight": variables["mlm_head/intermediate_dense/kernel"].T,
        "cls.predictions.transform.dense.bias": variables["mlm_head/intermediate_dense/bias"],
        "cls.predictions.transform.LayerNorm.weight": variables["mlm_head/intermediate_layer_norm/gamma"],
        "cls.predictions.transform.LayerNorm.bias": variables["mlm_head/intermediate_layer_norm/beta"],
        "cls.seq_relationship.weight": variables["nsp_head/kernel"].T,
        "cls.seq_relationship.bias": variables["nsp_head/bias"],
    }
    return {name: np.ascontiguousarray(value, np.float32) for name, value in weights.items()}


def linear(name: str, dense) -> dict:
    return {f"{name}.weight": np.asarray(dense.kernel).T, f"{name}.bias": dense.bias}


def layer_norm(name: str, layer) -> dict:
    return {f"{name}.weight": layer.gamma, f"{name}.bias": layer.beta}


def unsupported(model, task: str) -> str:
    """Why `task`'s head has no transformers form ("" when it has one): its family's word."""
    return model.task_specs[task].family.transformers_refusal(model, task)


def head_tensors(model, task: str) -> dict[str, np.ndarray]:
    """The head's weights under transformers' names, [labels, hidden] rows ({}: a head without
    weights, as an embedding task's)."""
    if not model.head(task).weights:
        return {}
    spec, (kernel, bias) = model.task_specs[task], model.head(task).get_weights()
    weight, bias = spec.family.head_to_transformers(spec, kernel.T, bias)  # kernel.T: (units, hidden)
    name = spec.family.transformers_head(spec)
    return {f"{name}.weight": weight, f"{name}.bias": bias}


def transformers_config(model, spec: Task, pad_id: int) -> dict:
    backbone = model.backbone
    names = spec.family.transformers_labels(spec)
    config = {
        "architectures": [spec.family.architecture], "model_type": "bert",
        "vocab_size": backbone.vocabulary_size, "hidden_size": backbone.hidden_dim,
        "num_hidden_layers": backbone.num_layers, "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_dim, "hidden_act": HIDDEN_ACT[activation_of(backbone)],
        "hidden_dropout_prob": backbone.dropout, "attention_probs_dropout_prob": backbone.dropout,
        "classifier_dropout": model.dropout_rate, "max_position_embeddings": backbone.max_sequence_length,
        "type_vocab_size": backbone.num_segments, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "pad_token_id": pad_id, "position_embedding_type": "absolute", "torch_dtype": "float32",
        "id2label": {str(index): name for index, name in enumerate(names)},
        "label2id": {name: index for index, name in enumerate(names)},
        "kerasbert_task": dataclasses.replace(spec, train_file="", dev_file="").to_config(),
    }
    if spec.family.problem_type:  # a sentence head
        config["problem_type"] = spec.family.problem_type
    return config


def tokenizer_files(tokenizer, max_positions: int) -> dict[str, dict]:
    """tokenizer_config.json and special_tokens_map.json; model_max_length is the encoder's
    position table (`max_positions`, 512 for MiniLM), the longest input transformers can read,
    not the run's packed length (which transformers' pipeline would exceed with a warning)."""
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
               "mask_token": "[MASK]"}
    settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.lowercase,
                "strip_accents": None if tokenizer.strip_accents == tokenizer.lowercase else tokenizer.strip_accents,
                "tokenize_chinese_chars": True, "model_max_length": max_positions, **special}
    return {"tokenizer_config.json": settings, "special_tokens_map.json": special}


def write_task_folder(model, preprocessor, task: str, folder: str) -> str:
    """One task as a transformers folder at `folder` (which must not exist), written atomically."""
    from safetensors.numpy import save_file

    if os.path.exists(folder):
        raise FileExistsError(f"{folder}: already there; export into a new folder")
    spec, tokenizer = model.task_specs[task], preprocessor.tokenizer
    partial = os.path.join(os.path.dirname(os.path.abspath(folder)), f".{os.path.basename(folder)}.writing-{os.getpid()}")
    os.makedirs(partial)
    tensors = {**encoder_weights(model.backbone, pooler=spec.family.pooled), **head_tensors(model, task)}
    save_file({name: np.ascontiguousarray(value, np.float32) for name, value in tensors.items()},
              os.path.join(partial, "model.safetensors"), metadata={"format": "pt"})
    files = {"config.json": transformers_config(model, spec, preprocessor.ids["pad"]),
             **tokenizer_files(tokenizer, model.backbone.max_sequence_length),
             **spec.family.transformers_files(model, preprocessor, task)}
    for name, content in files.items():
        os.makedirs(os.path.dirname(os.path.join(partial, name)), exist_ok=True)
        with open(os.path.join(partial, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)
            f.write("\n")
    with open(os.path.join(partial, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{token}\n" for token in tokenizer.get_vocabulary()))
    publish(partial, folder, replace=False)
    return folder


def export_transformers(model_dir, export_base: str, tasks=None) -> dict[str, str]:
    """Writes each task of a run (`model_dir`: a pipelines.finetune or import_transformers folder,
    or a (model, preprocessor) pair) as a transformers folder `<export_base>/<task>`; returns
    {task: folder}. `tasks` picks some (None: all). Every task is checked before any is written.

    Example:
        >>> export_transformers(run_dir, f"{tmp_path}/hf_models/run", tasks=("sst",))
        {'sst': '.../hf_models/run/sst'}
        >>> # then, with transformers: pipeline("text-classification", model=".../hf_models/run/sst")
    """
    model, preprocessor = load_finetuned(model_dir)[1:] if isinstance(model_dir, str) else model_dir
    tasks = tuple(model.tasks if tasks is None else tasks)
    unknown = [task for task in tasks if task not in model.tasks]
    if unknown:
        raise ConfigError(f"task(s) {unknown} are not the run's; its tasks: {list(model.tasks)}")
    refused = {task: reason for task in tasks if (reason := unsupported(model, task))}
    if refused:
        raise ConfigError("; ".join(f"task {task!r}: {reason}" for task, reason in refused.items())
                          + " (export the others with kerasbert.export_transformers(..., tasks=[...]))")
    for task in tasks:
        difference = model.task_specs[task].family.transformers_difference(model.task_specs[task])
        if difference:
            log.warning(difference)
    os.makedirs(export_base, exist_ok=True)
    return {task: write_task_folder(model, preprocessor, task, os.path.join(export_base, task)) for task in tasks}
