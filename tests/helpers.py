"""Helpers more than one test module builds on: a tiny fine-tuned run folder, a tiny
pretraining config, a tiny training run that can be poisoned with a non-finite batch, and
free loopback ports. (Light fixtures and subprocess runners are in conftest.py.)"""

import json
import os
import socket

import keras
import numpy as np
import tensorflow as tf

from kerasbert.config import FinetuneConfig, ModelConfig, PretrainConfig, load_config, save_config
from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.models.encoder import build_encoder
from kerasbert.tasks import BUILTIN_TASKS as TASKS
from kerasbert.tokenization import make_tokenizer
from kerasbert.training.run import TrainingRun
from tests.tiny_data import TINY_VOCAB, write_corpus

TEXTS_A = ["the cat sat on the mat .", "dogs ran fast"]
TEXTS_B = ["the cat sat .", "the dog ran on the mat"]


def tiny_model_dir(path, pair_encoder, sts_encoder="", seed=1, overrides=(), pooling="mean"):
    """What pipelines.finetune leaves behind, for a tiny random model (no training needed), its
    similarity task's own encoder `sts_encoder` if given; `overrides` are more `--set` strings
    for its config.json."""
    keras.utils.set_random_seed(seed)
    config = load_config(FinetuneConfig, None, [f"heads.pair_encoder={pair_encoder}", f"heads.pooling={pooling}",
                                                "data.max_sequence_length=16", "tasks=sst,para,sts", f"tasks.sts.encoder={sts_encoder}",
                                                *overrides])
    encoder = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2), len(TINY_VOCAB))
    model = MultitaskBert(encoder, pair_encoder=pair_encoder, pooling=pooling, tasks=tuple(config.tasks.values()))
    tokenizer = make_tokenizer(TINY_VOCAB)
    preprocessor = TaskPreprocessor(tokenizer, 16, pair_encoder, tasks=config.tasks)
    model(preprocessor("sts", tf.constant(TEXTS_A), tf.constant(TEXTS_B)))
    os.makedirs(path)
    model.save(os.path.join(path, "model.keras"))
    encoder.save_to_preset(os.path.join(path, "encoder"))
    tokenizer.save_to_preset(os.path.join(path, "encoder"))
    save_config(config, os.path.join(path, "config.json"))
    return model, preprocessor


def expected_outputs(model, pre):
    """What each export signature should answer for TEXTS_A/TEXTS_B, from the in-process model."""
    a, b = tf.constant(TEXTS_A), tf.constant(TEXTS_B)
    sst, para, sts = pre("sst", a, a), pre("para", a, b), pre("sts", a, b)
    probabilities = tf.nn.softmax(model.head_output("sst", sst)).numpy()
    probability = tf.sigmoid(model.head_output("para", para)).numpy()
    return {
        "sentiment": {"probabilities": probabilities, "label": probabilities.argmax(-1),
                      "class_name": [TASKS["sst"].settings.class_names[i] for i in probabilities.argmax(-1)]},
        "paraphrase": {"probability": probability, "label": (probability >= 0.5).astype(int),
                       "class_name": [TASKS["para"].settings.class_names[int(p >= 0.5)] for p in probability]},
        "similarity": {"score": model.head_output("sts", sts).numpy()},
        "embed": {"embedding": model.embed(pre.pack(a)).numpy()},
    }, {"sst": sst, "para": para, "sts": sts}


def save_family_functions(path, model, graph, functions):
    """Saves a family's serving functions ({name: (function, input signature)}) of `model`
    over its `graph` as a SavedModel at `path`, as kerasbert.export does for a run's tasks."""
    module = tf.Module()
    module.model, module.graph = model, graph  # the variables, and the tokenizer's tables
    signatures = {name: tf.function(function, input_signature=signature).get_concrete_function()
                  for name, (function, signature) in functions.items()}
    tf.saved_model.save(module, path, signatures=signatures)


def tiny_run_config(tmp_path, steps=20, block=10, batch=8):
    corpus = write_corpus(str(tmp_path / "corpus.txt"))
    heldout = write_corpus(str(tmp_path / "heldout.txt"), num_documents=10, seed=1)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(TINY_VOCAB) + "\n")
    config = {
        "model": {"preset": "custom", "num_layers": 1, "hidden_dim": 16, "num_heads": 2,
                  "max_sequence_length": 32},
        "data": {"sources": [corpus], "heldout_source": heldout, "vocab_file": str(vocab),
                 "heldout_examples": 16, "mask_selection_length": 6},
        "train": {"batch_size": batch, "total_steps": steps, "steps_per_block": block,
                  "learning_rate": 0.001},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


STEPS_PER_BLOCK = 3


def batches(poisoned_step=None, count=30):
    """Batches of 4 rows of 3 features, y = sum(x); the batch of step `poisoned_step`
    (1-based) holds an infinite input."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(count, 4, 3)).astype("float32")
    if poisoned_step is not None:
        x[poisoned_step - 1, 0, 0] = np.inf
    y = x.sum(-1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y))


def start_run(tmp_path, data, skip=False):
    config = load_config(PretrainConfig, None, ["train.total_steps=9", f"train.steps_per_block={STEPS_PER_BLOCK}",
                                                "train.learning_rate=0.01", f"train.skip_nonfinite_batches={skip}"])
    run = TrainingRun(config, str(tmp_path / "run"), ("backup",))
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    data = data.skip(run.start_step)
    run.prepare(model, lambda optimizer: model.compile(optimizer=optimizer, loss="mse"), data)
    return run, model, data


FAMILY_TAGS = ("O", "B-ANIMAL", "I-ANIMAL", "B-LOC", "I-LOC")


def tiny_families_export(path, seed=1):
    """Exports (`kerasbert.export.export_model`) a tiny random `MultitaskBert` with the
    tasks `ner` and `squad` to the version folder `path`; returns {"entities", "answer"}:
    the in-memory model's text functions the export serves. Windows of 16 tokens at stride
    4, at most 3 (a context of more than 17 word pieces is refused)."""
    from kerasbert.export import export_model
    from kerasbert.families.tagging.conll import Sentence
    from kerasbert.finetuning.data import task_dataset
    from kerasbert.finetuning.evaluation import family_signatures
    from kerasbert.tasks import Task

    keras.utils.set_random_seed(seed)
    encoder = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2), len(TINY_VOCAB))
    tasks = [Task.from_config("ner", {"labels": FAMILY_TAGS}),
             Task.from_config("squad", {"sequence_length": 16, "doc_stride": 4, "max_query_length": 4, "max_windows": 3})]
    model = MultitaskBert(encoder, tasks=tasks)
    preprocessor = TaskPreprocessor(make_tokenizer(TINY_VOCAB), 16)
    sentences = [Sentence(["the", "cat"], ["O", "B-ANIMAL"], 1)]
    model(next(iter(task_dataset(model.task_specs["ner"], sentences, preprocessor, 1, False)))[0])
    export_model(model, preprocessor, os.path.dirname(str(path)), version=int(os.path.basename(str(path))),
                 tasks=("ner", "squad"))
    return {"entities": family_signatures(model, preprocessor, "ner").entities,
            "answer": family_signatures(model, preprocessor, "squad").answer}


def tiny_tasks_run(path, seed=1):
    """A tiny random run folder as pipelines.finetune leaves it, with a head of every kind the
    shipped tasks have: sst, para, sts (pairs as one packed sequence, [CLS] pooling, so that
    kerasbert/hf/exporting.py takes it), ner (FAMILY_TAGS) and squad (windows of 16 tokens at
    stride 4, at most 3). For the docstring examples (../conftest.py)."""
    from kerasbert.families.tagging.conll import Sentence
    from kerasbert.finetuning.data import task_dataset
    from kerasbert.tasks import Task

    keras.utils.set_random_seed(seed)
    config = load_config(FinetuneConfig, None, ["heads.pair_encoder=cross", "heads.pooling=cls",
                                                "data.max_sequence_length=16"])
    encoder = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2), len(TINY_VOCAB))
    tasks = ["sst", "para", "sts", Task.from_config("ner", {"labels": FAMILY_TAGS}),
             Task.from_config("squad", {"sequence_length": 16, "doc_stride": 4, "max_query_length": 4, "max_windows": 3})]
    model = MultitaskBert(encoder, pair_encoder="cross", pooling="cls", tasks=tasks)
    tokenizer = make_tokenizer(TINY_VOCAB)
    preprocessor = TaskPreprocessor(tokenizer, 16, "cross")
    sentences = [Sentence(["the", "cat"], ["O", "B-ANIMAL"], 1)]
    model(next(iter(task_dataset(model.task_specs["ner"], sentences, preprocessor, 1, False)))[0])
    os.makedirs(path)
    model.save(os.path.join(path, "model.keras"))
    encoder.save_to_preset(os.path.join(path, "encoder"))
    tokenizer.save_to_preset(os.path.join(path, "encoder"))
    save_config(config, os.path.join(path, "config.json"))
    return str(path)
