"""Export a fine-tuned model as a TensorFlow SavedModel with named serving signatures.

Layout is TF Serving's: `<export_base>/<version>/saved_model.pb`, `variables/`, `assets/`.
A version is built in a hidden temporary folder beside it and renamed into place, so
a polling server never sees half a model; an existing version is never overwritten.
The resolved config and the vocabulary travel in `assets/`; warm-up requests for the
text signatures in `assets.extra/tf_serving_warmup_requests`, which TF Serving (and
`python -m serving`) replays before it serves the version; what a row of `entities` and
`answer` costs in `assets.extra/row_costs.json`, which `python -m serving` cuts requests by
(serving/row_costs.py) and TF Serving ignores.

Signatures (batch-major; text is UTF-8, tokenized inside the graph with tf_text ops),
named by each task's head (its name, for a task declared without one) and shaped by its
family (kerasbert/families/: `Family.serving_functions`); for the default tasks:
    sentiment  (text)            -> probabilities (batch, 5), label int64, class_name  (classes)
    paraphrase (text_a, text_b)  -> probability (batch,), label int64, class_name      (pair_binary)
    similarity (text_a, text_b)  -> score (batch,) in [0, 5]                           (pair_score)
    embed      (text)            -> embedding (batch, hidden)
and for the token-level families (`ner`, `squad`; kerasbert/families/*/export.py, docs/families.md):
    entities   (text)              -> entity_text, entity_type, entity_start, entity_end,
                                      entity_score (batch, n), num_entities; word tags (tags)
    answer     (question, context) -> answer, answer_start, answer_end, score (batch,)    (span)
(a pair_classes task: text_a, text_b -> probabilities, label, class_name; a score task:
text -> score)
and `<name>_tokens` variants taking token_ids, segment_ids, padding_mask (int32,
(batch, seq)) and, for bi-encoder pair heads, token_ids_b, segment_ids_b,
padding_mask_b: core TensorFlow ops only, for clients that tokenize themselves.
For TF Serving's :classify and :regress (serialized tf.Examples with bytes features
`text`, or `text_a` and `text_b`, in `inputs`):
    sentiment_classify   -> classes (the five class names, "very negative".."very positive"), scores (batch, 5)
    paraphrase_classify  -> classes "not duplicate", "duplicate", scores (batch, 2)
    similarity_regress   -> outputs (batch,) in [0, 5]
`serving_default` is the first exported task's text signature: `sentiment` unless the
export leaves that task out (`export_model(..., tasks=...)`).

Every op of every graph is TensorFlow's or TF Text's, the ops the stock
`tensorflow_model_server` has; an export that needs another is refused (kerasbert/op_audit.py).

Examples: `export_saved_model` (a pipelines.finetune folder) and `export_model` (a model in
your own script), below.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from kerasbert.errors import ConfigError
from kerasbert.compat.keras import ordered_export_archive
from kerasbert.durable import publish
from kerasbert.config import to_dict
from kerasbert.families.sentence_export import SEGMENT, TEXT, token_specs
from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.finetuning.load import load_finetuned
from kerasbert.models import unpadded as unpadded_encoder
from kerasbert.models.bucketed import bucketed_embedding
from kerasbert.models.one_row import one_row_embedding
from kerasbert.op_audit import check_servable_ops
from kerasbert.packing import ENCODER_KEYS, pack_segments
from kerasbert.quantize import COMPUTE_DTYPES, serving_precision
from kerasbert.tasks import Task
from kerasbert.tokenization import write_vocabulary
from kerasbert.training.finite import check_finite_weights
from kerasbert.warmup_requests import predict_request, write_warmup_requests

_BUILDING = re.compile(r"^\.\d+-building-(\d+)-")  # a version being written, and the writer's pid


def serving_methods(tasks) -> dict[str, str]:
    """The method_name of each task's :classify or :regress signature (the token-level families have none)."""
    return {task.signature_names[2]: task.serving_method for task in tasks if task.serving_method}


def version_number(folder: str) -> int | None:
    """A version folder's number as the server reads it (TF Serving: absl::SimpleAtoi into an
    int64): ASCII digits with an optional sign and surrounding ASCII white space; None
    otherwise. serving/ keeps its own copy (the layers do not import each other);
    tests/test_version_folders.py holds the two equal.

    >>> version_number("007"), version_number("\u00b2"), version_number("1a"), version_number("9" * 20)
    (7, None, None, None)
    """
    text = folder.strip(" \t\n\v\f\r")
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19:  # beyond int64 (and int() reads at most 4,300 digits)
        return None
    number = -int(significant) if text[0] == "-" else int(significant)
    return number if -(2**63) <= number < 2**63 else None


def next_version(export_base: str) -> int:
    """One more than the newest version folder in `export_base` (1 for none)."""
    names = os.listdir(export_base) if os.path.isdir(export_base) else []
    return max([0, *(number for number in map(version_number, names) if number is not None)]) + 1


def set_signature_methods(path: str, methods: dict[str, str]) -> None:
    """Sets the method_name of signatures in `path`/saved_model.pb (tf.saved_model.save
    writes every signature as predict; TF Serving's classify/regress check this name)."""
    proto_path = os.path.join(path, "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    with open(proto_path, "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        for name, method in methods.items():
            meta_graph.signature_def[name].method_name = method
    with open(proto_path, "wb") as f:
        f.write(saved_model.SerializeToString())


def warmup_requests(signatures, tasks) -> list:
    """One PredictRequest per text signature among `signatures`, in their order, replayed by
    servers when they load the version."""
    sentence, other = [b"a warm-up sentence ."], [b"another warm-up sentence ."]
    inputs = {task.head: task.family.warmup_inputs(task, sentence, other) for task in tasks}
    inputs["embed"] = {"text": sentence}
    return [predict_request(signature, inputs[signature]) for signature in signatures if signature in inputs]


class ServingGraph:
    """The traced pieces every signature shares: `tokenize` (text -> ragged token ids),
    `pack` (one or two segments -> token tensors) and `encode` (token tensors -> sentence
    embedding), so the SavedModel holds each graph once rather than once per signature.

    Packing is `kerasbert.packing.pack_segments`, which gives keras-hub's packer's output in
    a small graph that a server loads fast. The encoder runs over the real tokens only
    (kerasbert/models/unpadded.py), however the model was trained: on the SST-5 dev
    sentences, 32 to a batch, that halves its work. A one-sentence request runs
    kerasbert/models/one_row.py instead: the same embedding from a fifth of the graph nodes,
    which at batch 1 is what a call's time goes to. `compute_dtype` (a `Bfloat16Weights` or
    `Int8Weights` of kerasbert/quantize.py) runs its matrix products in that type.
    """

    def __init__(self, model, preprocessor: TaskPreprocessor, compute_dtype: str | None = None, xla: bool = False):
        keys, ids, length = ENCODER_KEYS, preprocessor.ids, preprocessor.sequence_length
        self.model, self.specs = model, model.task_specs
        self.bi = {name: preprocessor.encoder_of(task) == "bi" for name, task in self.specs.items()}

        def unpadded(*tokens):
            return model.embed(dict(zip(keys, tokens)), unpadded=True, compute_dtype=compute_dtype)

        def lean(*tokens):
            return one_row_embedding(model.backbone, dict(zip(keys, tokens)), model.pooling, compute_dtype)

        # One row: few ops (kerasbert/models/one_row.py, on the keras-hub releases unpadded.py knows),
        # or with xla XLA's program for its bucket (kerasbert/models/bucketed.py).
        one_row = bucketed_embedding(model, length) if xla else lean if unpadded_encoder.available() else None

        def encode(*tokens):
            if one_row is None:
                return unpadded(*tokens)
            return tf.cond(tf.shape(tokens[0])[0] == 1, lambda: one_row(*tokens), lambda: unpadded(*tokens))

        self.encode = tf.function(encode, input_signature=token_specs(), autograph=False)
        self.tokenize = preprocessor.tokenize
        self.pack = {count: tf.function(lambda *segments: tuple(pack_segments(segments, length, ids)[k] for k in keys),
                                        input_signature=[SEGMENT] * count, autograph=False) for count in (1, 2)}

    def embed_text(self, text):
        return self.encode(*self.pack[1](self.tokenize(text)))

    def pair_embeddings(self, task, a, b):
        """(u, v) for a bi-encoder task; (u of the packed pair, None) for a cross-encoder one."""
        if self.bi[task]:
            return self.embed_text(a), self.embed_text(b)
        return self.encode(*self.pack[2](self.tokenize(a), self.tokenize(b))), None

    def token_embeddings(self, task, tokens):
        """As `pair_embeddings`, from token tensors (a bi-encoder's are a's three, then b's)."""
        if self.bi.get(task):
            return self.encode(*tokens[:3]), self.encode(*tokens[3:])
        return self.encode(*tokens), None


def serving_functions(model, preprocessor: TaskPreprocessor, tasks=None, compute_dtype: str | None = None,
                      xla: bool = False) -> dict:
    """name -> (function, input signature) for the signatures of `tasks` (None: all the
    model's) and `embed`, text signatures first (the first is also serving_default). Each
    function returns a dict of named outputs (`ServingGraph`)."""
    tasks = tuple(model.tasks if tasks is None else (task.name if isinstance(task, Task) else task for task in tasks))
    missing = [task for task in tasks if task not in model.tasks]
    if missing or not tasks or len(set(tasks)) != len(tasks):
        raise ConfigError(f"The tasks to export are some of the model's {model.tasks}, each once. Received: {tasks}")
    graph = ServingGraph(model, preprocessor, compute_dtype, xla)
    by_task = {task: model.task_specs[task].family.serving_functions(model, preprocessor, graph, task)
               for task in tasks}
    heads = {task: model.task_specs[task].head for task in tasks}
    functions = {heads[task]: by_task[task][heads[task]] for task in tasks}
    functions["embed"] = (lambda text: {"embedding": graph.embed_text(text)}, [TEXT])
    functions.update({name: entry for task in tasks for name, entry in by_task[task].items() if name != heads[task]})
    functions["embed_tokens"] = (lambda *t: {"embedding": graph.encode(*t)}, token_specs())
    return functions


def write_row_costs(path: str, costs: dict) -> None:
    """Writes what a row of each text signature costs ({signature: {input: cost}}; the families')
    as `path`/assets.extra/row_costs.json, which `python -m serving` cuts requests by
    (serving/row_costs.py) and TF Serving ignores; nothing when `costs` is empty."""
    if costs:
        os.makedirs(os.path.join(path, "assets.extra"), exist_ok=True)
        with open(os.path.join(path, "assets.extra", "row_costs.json"), "w", encoding="utf-8") as f:
            json.dump(costs, f, indent=2, sort_keys=True)
            f.write("\n")


def remove_abandoned_builds(export_base: str) -> list[str]:
    """Removes the hidden build folders of exports whose process is gone (killed mid-write);
    returns their names. A server never loads them: their names are not versions."""
    removed = []
    for name in os.listdir(export_base):
        match = _BUILDING.match(name)
        if match and not _process_alive(int(match.group(1))):
            shutil.rmtree(os.path.join(export_base, name), ignore_errors=True)
            removed.append(name)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def export_model(model, preprocessor: TaskPreprocessor, export_base: str, version: int | None = None,
                 tasks=None, config: dict | None = None, compute_dtype: str | None = None,
                 xla: bool = False) -> str:
    """Writes a fine-tuned `MultitaskBert` as `<export_base>/<version>/` atomically; returns
    its path. `tasks` picks the task signatures (None: every head of the model; a model
    fine-tuned on one task exports that task's); `config`, if given, travels as `assets/kerasbert_config.json`.
    `compute_dtype="bfloat16"` serves the encoder's matrix products in bfloat16: on CPUs with
    AVX512-BF16 or AMX about 1.5x the sentences/s at batch 32, embeddings within a cosine
    of 0.9999 of float32's (docs/benchmarks.md); the model's weights stay float32, with bfloat16
    copies of the projections' kernels. `compute_dtype="int8"`
    serves them as int8 on oneDNN's quantized kernels (kerasbert/quantize.py). `xla=True` (float32
    only) runs a one-row request's encoder compiled by XLA (kerasbert/models/bucketed.py).

    Example:
        >>> export_model(model, preprocessor, f"{tmp_path}/saved_models/sst2", tasks=("sst",))
        '.../saved_models/sst2/1'
    """
    tokenizer = preprocessor.tokenizer
    check_finite_weights(model, f"exporting it to {export_base}")
    os.makedirs(export_base, exist_ok=True)
    remove_abandoned_builds(export_base)
    version = version or next_version(export_base)
    target = os.path.join(export_base, str(version))
    if os.path.exists(target):
        raise FileExistsError(f"{target} exists: an exported version is never overwritten. "
                              "Omit --version to take the next one.")

    # The endpoints track the variables they use. archive.track(model) would add the
    # Keras variables as second objects, and the checkpoint would hold every weight twice.
    archive = ordered_export_archive(model)
    tokenizer(tf.constant(["build"]))  # a Keras layer must be built before it is tracked
    archive.track(tokenizer)  # its WordPiece tables are resources the graph needs
    if compute_dtype not in (None, *COMPUTE_DTYPES):
        raise ConfigError(f"compute_dtype must be one of {list(COMPUTE_DTYPES)}. Received: {compute_dtype!r}")
    precision = serving_precision(model.backbone, compute_dtype)  # kerasbert/quantize.py
    if isinstance(precision, tf.Module):
        archive.track(precision)  # the int8 weights: variables of their own
    if xla and precision is not None:
        raise ConfigError(f"xla compiles the float32 encoder only. Received: compute_dtype={compute_dtype!r}")
    functions = serving_functions(model, preprocessor, tasks, precision, xla)
    for spec in model.task_specs.values():  # the token-level families' offset tokenizers: their tables too
        if spec.head in functions:
            for tracked in spec.family.tracked(preprocessor, spec):
                archive.track(tracked)
    for name, (function, signature) in functions.items():
        archive.add_endpoint(name, function, input_signature=signature)  # keras traces it without autograph

    building = tempfile.mkdtemp(prefix=f".{version}-building-{os.getpid()}-", dir=export_base)
    try:
        archive.write_out(building, verbose=False)
        check_servable_ops(building, target)  # every op TensorFlow's or TF Text's, as tensorflow_model_server has
        specs = model.task_specs.values()
        set_signature_methods(building, {name: method for name, method in serving_methods(specs).items()
                                         if name in functions})
        write_warmup_requests(building, warmup_requests(functions, specs))
        write_row_costs(building, {name: cost for task, spec in model.task_specs.items() if spec.head in functions
                                   for name, cost in spec.family.row_costs(model, preprocessor, task).items()})
        assets = os.path.join(building, "assets")
        os.makedirs(assets, exist_ok=True)
        if config is not None:
            with open(os.path.join(assets, "kerasbert_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2)
                f.write("\n")
        write_vocabulary(tokenizer.get_vocabulary(), os.path.join(assets, "vocab.txt"))
        publish(building, target, replace=False)  # synced; atomic on one filesystem
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return target


def export_saved_model(model_dir: str, export_base: str, version: int | None = None,
                       compute_dtype: str | None = None, xla: bool = False) -> str:
    """Exports the fine-tuning run in `model_dir` (all tasks) as `<export_base>/<version>/`.

    Example:
        >>> version = export_saved_model(run_dir, f"{tmp_path}/saved_models/kerasbert")  # e.g. runs/finetune
        >>> version
        '.../saved_models/kerasbert/1'
        >>> sorted(os.listdir(version))
        ['assets', 'assets.extra', 'fingerprint.pb', 'saved_model.pb', 'variables']
    """
    config, model, preprocessor = load_finetuned(model_dir)
    return export_model(model, preprocessor, export_base, version, config=to_dict(config),
                        compute_dtype=compute_dtype, xla=xla)
