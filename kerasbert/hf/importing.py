"""A fine-tuned transformers BERT in, a kerasbert run out: the same model with one task head,
which evaluation, export, `TextPredictor`, batch_predict and the server take like any run.

The task is declared from the checkpoint:
    BertForSequenceClassification  -> classes (pair_classes with pair=True), class names from
                                      id2label; one label or problem_type regression: score
                                      (pair_score) with score_output "linear", transformers'
                                      unclipped regression value. Default name `classifier`.
    BertForTokenClassification     -> tags, tag names from id2label ('O' moved first). `ner`,
                                      served as `entities`.
    BertForQuestionAnswering       -> span. `squad`, served as `answer`.
A folder kerasbert wrote (kerasbert/hf/exporting.py) carries its task's declaration in
config.json (`kerasbert_task`), so the kind, the classes and a score's range come back as they
were. Sentence heads read the [CLS] pooler (heads.pooling "cls"), as transformers' do; the
packed length is the config's max_position_embeddings, at most 512, unless `sequence_length`
says. The encoder's weights go through keras-hub's converter into a `BertEncoder` computing the
checkpoint's `hidden_act` ("gelu": exact; "gelu_new", "gelu_pytorch_tanh": tanh), so its answers
are transformers' to float rounding (tests/test_transformers_bridge.py).

A run folder holds config.json, model.keras and encoder/ (weights and tokenizer), as a
fine-tuning run's: continue fine-tuning from it with `pipelines.finetune --init_checkpoint RUN`
(a task of the same name, kind and classes or tags, with heads.pooling "cls", keeps its head).

Example:
    >>> config, model, preprocessor = load_transformers(hf_checkpoint)  # e.g. runs/hf/bert-sst2
    >>> model.tasks, model.task_specs["classifier"].settings.class_names
    (('classifier',), ('negative', 'positive'))
    >>> import_transformers(hf_checkpoint, f"{tmp_path}/sst2-imported")  # then pipelines.export
    '.../sst2-imported'
"""

from __future__ import annotations

import os

import keras_hub
import numpy as np

from kerasbert.compat.keras_hub import convert_bert_weights
from kerasbert.config import FinetuneConfig, FinetuneDataConfig, HeadsConfig, save_config
from kerasbert.durable import publish
from kerasbert.errors import DataError
from kerasbert.families.tagging import TaggingSettings
from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.hf.checkpoint import TransformersCheckpoint, read_checkpoint
from kerasbert.models.encoder import BertEncoder
from kerasbert.tasks import Task

# The default task of each architecture: (name, head), so the export's signatures are these heads.
DEFAULT_TASKS = {"BertForSequenceClassification": ("classifier", "classifier"),
                 "BertForTokenClassification": ("ner", "entities"),
                 "BertForQuestionAnswering": ("squad", "answer")}


class WeightReader:
    """What keras-hub's converter asks of a checkpoint: tensors by transformers' name (without
    `bert.`). The pooler, which transformers' token and QA models do not have, stays as built."""

    def __init__(self, checkpoint: TransformersCheckpoint):
        self.checkpoint = checkpoint

    def get_tensor(self, name: str) -> np.ndarray:
        if name not in self.checkpoint.weights:
            raise DataError(f"{self.checkpoint.folder}: weight {name} is missing from the checkpoint")
        return self.checkpoint.weights[name]

    def port_weight(self, keras_variable, hf_weight_key: str, hook_fn=None) -> None:
        if hf_weight_key.startswith("pooler.") and hf_weight_key not in self.checkpoint.weights:
            return
        value = self.get_tensor(hf_weight_key)
        if hook_fn:
            value = hook_fn(value, list(keras_variable.shape))
        if tuple(value.shape) != tuple(keras_variable.shape):
            raise DataError(f"{self.checkpoint.folder}: weight {hf_weight_key} has shape "
                            f"{tuple(self.get_tensor(hf_weight_key).shape)}, which config.json's sizes do not "
                            f"give (the encoder needs {tuple(keras_variable.shape)})")
        keras_variable.assign(value)


def declared_task(checkpoint: TransformersCheckpoint, name: str | None = None, pair: bool = False) -> Task:
    """The task a checkpoint's head answers, named `name` (its signatures too) or by default."""
    declaration = checkpoint.config.get("kerasbert_task")
    if declaration:  # written by kerasbert: the task as it was
        values = dict(declaration)
        if name:
            values.update(name=name, head=name)
        return Task.from_config(values["name"], values)
    default_name, default_head = DEFAULT_TASKS[checkpoint.architecture]
    name, head = (name, name) if name else (default_name, default_head)
    labels = checkpoint.labels()
    if checkpoint.architecture == "BertForQuestionAnswering":
        return Task(name, "span", head=head)
    if checkpoint.architecture == "BertForTokenClassification":
        if "O" not in labels:
            raise DataError(f"{checkpoint.folder}: id2label {labels} has no 'O' tag; kerasbert's tagger decodes "
                            "IOB2 tags with 'O' outside entities")
        words = TaggingSettings(words="punctuation")  # transformers' pipeline splits punctuation off its words
        return Task(name, "tags", head=head, labels=("O", *(label for label in labels if label != "O")), settings=words)
    if len(labels) == 1 or checkpoint.config.get("problem_type") == "regression":
        return Task(name, "pair_score" if pair else "score", head=head, text_a="text_a" if pair else "",
                    text_b="text_b" if pair else "", text="" if pair else "text", score_output="linear")
    return Task(name, "pair_classes" if pair else "classes", head=head, class_names=tuple(labels),
                text_a="text_a" if pair else "", text_b="text_b" if pair else "", text="" if pair else "text")


def head_weights(checkpoint: TransformersCheckpoint, task: Task) -> tuple[np.ndarray, np.ndarray]:
    """The Keras Dense head's (kernel (hidden, units), bias) from transformers' [units, hidden] rows."""
    weight = checkpoint.weights[f"{checkpoint.head_name}.weight"]  # (rows, hidden)
    bias = checkpoint.weights[f"{checkpoint.head_name}.bias"]
    weight, bias = task.family.head_from_transformers(task, weight, bias, checkpoint.labels())
    rows = task.family.head_units(task)
    if weight.shape[0] != rows:
        raise DataError(f"{checkpoint.folder}: a {task.kind} head of {rows} output(s), but "
                        f"{checkpoint.head_name}.weight has {weight.shape[0]} rows")
    return np.ascontiguousarray(weight.T), bias


def sequence_length_of(checkpoint: TransformersCheckpoint, sequence_length: int = 0) -> int:
    positions = checkpoint.config["max_position_embeddings"]
    if sequence_length > positions:  # longer inputs would index past the position embeddings
        raise DataError(f"{checkpoint.folder}: sequence_length {sequence_length} is more than the checkpoint's "
                        f"max_position_embeddings {positions}")
    return sequence_length or min(512, positions)


def load_transformers(checkpoint: str, task: str | None = None, pair: bool = False, sequence_length: int = 0):
    """(config, model, preprocessor) of a transformers BERT checkpoint, as `load_finetuned`
    gives a run's: a `MultitaskBert` with one head, the task's name `task` (default:
    `classifier`, `ner` or `squad`); `pair` reads a sequence classifier's input as two texts;
    `sequence_length` packs shorter than the config's positions (at most 512).

    Example:
        >>> from kerasbert import TextPredictor
        >>> config, model, preprocessor = load_transformers(hf_ner_checkpoint, sequence_length=16)  # e.g. runs/hf/bert-conll
        >>> outputs = TextPredictor(model, preprocessor).predict("entities", ["the cat sat on the mat ."])
        >>> outputs["word"].tolist(), outputs["word_tag"].tolist()  # a tiny random checkpoint's tags
        ([[b'the', b'cat', b'sat', b'on', b'the', b'mat', b'.']], [[b'B-PER', b'O', b'B-PER', b'O', b'B-PER', b'I-LOC', b'O']])
    """
    read = read_checkpoint(checkpoint)
    hf = read.config
    spec = declared_task(read, task, pair)
    config = FinetuneConfig(tasks={spec.name: spec},
                            data=FinetuneDataConfig(max_sequence_length=sequence_length_of(read, sequence_length)),
                            heads=HeadsConfig(pooling="cls", dropout=hf.get("classifier_dropout")
                                              or hf.get("hidden_dropout_prob", 0.1)))
    backbone = BertEncoder(
        vocabulary_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        hidden_dim=hf["hidden_size"], intermediate_dim=hf["intermediate_size"],
        dropout=hf.get("hidden_dropout_prob", 0.1), max_sequence_length=hf["max_position_embeddings"],
        num_segments=hf.get("type_vocab_size", 2), activation=read.activation)
    convert_bert_weights(backbone, WeightReader(read), hf)
    model = MultitaskBert(backbone, tasks=tuple(config.tasks.values()), pooling="cls", dropout=config.heads.dropout)
    model.build()
    model.head(spec.name).set_weights(list(head_weights(read, config.tasks[spec.name])))
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=read.vocabulary, lowercase=read.lowercase,
                                               strip_accents=read.strip_accents)
    preprocessor = TaskPreprocessor(tokenizer, config.data.max_sequence_length)
    return config, model, preprocessor


def import_transformers(checkpoint: str, output_dir: str, task: str | None = None, pair: bool = False,
                        sequence_length: int = 0) -> str:
    """Writes the run `load_transformers` gives as the folder `output_dir` (which must not hold
    anything yet), atomically; returns `output_dir`.

    Example:
        >>> from kerasbert import TextPredictor
        >>> import_transformers(hf_checkpoint, f"{tmp_path}/sst2-imported", task="sst2")  # e.g. runs/hf/bert-sst2
        '.../sst2-imported'
        >>> TextPredictor.from_run(f"{tmp_path}/sst2-imported").predict("sst2", ["the cat sat"])["class_name"]
        array([b'positive'], dtype=object)
    """
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        raise FileExistsError(f"{output_dir}: not empty; the imported run goes into a new folder")
    config, model, preprocessor = load_transformers(checkpoint, task, pair, sequence_length)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    partial = os.path.join(parent, f".{os.path.basename(os.path.abspath(output_dir))}.importing-{os.getpid()}")
    os.makedirs(partial)
    save_config(config, os.path.join(partial, "config.json"))
    model.save(os.path.join(partial, "model.keras"))
    model.backbone.save_to_preset(os.path.join(partial, "encoder"))
    preprocessor.tokenizer.save_to_preset(os.path.join(partial, "encoder"))
    publish(partial, output_dir, replace=False)
    return output_dir

