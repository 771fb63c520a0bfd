"""One pretraining run: corpus -> examples -> model -> fit -> held-out metrics -> outputs.

Output folder layout (written by the chief only):
    config.json          resolved PretrainConfig
    vocab.txt            the vocabulary (trained here, or the checkpoint's)
    encoder/             keras-hub preset (encoder + tokenizer): `BertBackbone.from_preset`
    pretrainer.keras     the whole model with both heads
    checkpoints/         weights after the last blocks; backup/ while running (resume)
    history.csv, logs/   per-block training and held-out (val_*) metrics; TensorBoard
    steps.csv            the training losses every tenth of a block
    curves.png           loss and accuracy per block, training and held-out
    metrics.json         held-out mlm/nsp accuracy and loss, train_steps, speed

Example (`pretrain_config`: 2 steps of a 1-layer encoder on a tiny corpus; on the shared data,
`load_config(PretrainConfig, "pipelines/configs/pretrain_tiny.json")` is a 60-step run of its own):
    >>> metrics = run_pretraining(pretrain_config, data_dir="", output_dir=f"{tmp_path}/tiny")
    == reading corpora [...
    == done: mlm_accuracy=... -> .../tiny [...]
    >>> metrics["train_steps"], 0 <= metrics["mlm_accuracy"] <= 1
    (2, True)
    >>> sorted(os.listdir(f"{tmp_path}/tiny"))
    ['checkpoints', 'config.json', 'curves.png', 'encoder', 'history.csv', 'logs', 'metrics.json', 'pretrainer.keras', 'steps.csv', 'vocab.txt']
"""

from __future__ import annotations

import logging
import os

import keras
import numpy as np
import tensorflow as tf

from kerasbert import tokenization
from kerasbert.config import PretrainConfig
from kerasbert.console import stage
from kerasbert.data.corpus import load_labelled_corpora
from kerasbert.errors import ConfigError
from kerasbert.models.encoder import build_encoder, load_encoder
from kerasbert.models.pretrainer import BertPretrainer, pretraining_compile_args
from kerasbert.pretraining.dataset import examples_dataset, tfrecord_dataset
from kerasbert.pretraining.inputs import (check_enough_examples, heldout_batches, heldout_pairs,
                                          tokenize_documents, training_batches, training_pairs)
from kerasbert.plots import plot_curves
from kerasbert.training.finite import check_finite_weights
from kerasbert.training.precision import mixed_precision
from kerasbert.training.run import FitResult, TrainingRun
from kerasbert.training.run_folder import mark_finished

log = logging.getLogger(__name__)

# What a run writes into its output folder (the layout above); --overwrite removes these.
RUN_OUTPUTS = ("config.json", "vocab.txt", "encoder", "pretrainer.keras", "checkpoints", "backup",
               "history.csv", "steps.csv", "logs", "curves.png", "metrics.json")


def has_pretraining_heads(checkpoint: str) -> bool:
    """Whether `checkpoint` is a pipelines.pretrain run, whose MLM and NSP heads continue too
    (any checkpoint's encoder and tokenizer are found by `tokenization.checkpoint_source`)."""
    return os.path.isfile(os.path.join(checkpoint, "pretrainer.keras"))


def resolve_tokenizer(config: PretrainConfig, documents, init_checkpoint: str | None, output_dir: str,
                      is_chief: bool = True):
    """Tokenizer of the init checkpoint, of `data.vocab_file`, or trained on the corpus
    (deterministic, so every worker trains the same one; only the chief saves it)."""
    if init_checkpoint:
        return tokenization.load_tokenizer(init_checkpoint)
    if config.data.vocab_file:
        return tokenization.make_tokenizer(config.data.vocab_file)
    vocab_path = os.path.join(output_dir, "vocab.txt")
    if os.path.exists(vocab_path):  # a resumed run keeps its vocabulary
        return tokenization.make_tokenizer(vocab_path)
    stage(f"training a {config.data.vocab_size}-token WordPiece vocabulary")
    sentences = [s for doc in documents for s in doc]
    vocabulary = tokenization.train_vocabulary(sentences, config.data.vocab_size,
                                               vocab_path if is_chief else None)
    return tokenization.make_tokenizer(vocabulary)


def unigram_log_prior(tokenized_documents, vocabulary_size: int) -> np.ndarray:
    """log p(token) over all tokens of the documents, add-one smoothed.

    Example:
        >>> unigram_log_prior([[[3, 3], [4]]], vocabulary_size=5).round(2)
        array([-2.08, -2.08, -2.08, -0.98, -1.39], dtype=float32)
    """
    counts = np.ones(vocabulary_size, np.float64)
    for document in tokenized_documents:
        for sentence in document:
            np.add.at(counts, sentence, 1)
    return np.log(counts / counts.sum()).astype(np.float32)


def set_mlm_bias(model: BertPretrainer, bias: np.ndarray) -> None:
    (variable,) = [w for w in model.mlm_head.weights if w.path.endswith("output_bias")]
    variable.assign(bias)


def build_model(config: PretrainConfig, vocabulary_size: int, init_checkpoint: str | None) -> BertPretrainer:
    """Pretrainer from scratch, from a preset/HF encoder (fresh heads), or from a
    kerasbert run (encoder and heads)."""
    length, nsp = config.data.mask_selection_length, config.data.nsp
    if init_checkpoint and has_pretraining_heads(init_checkpoint):
        previous = keras.models.load_model(os.path.join(init_checkpoint, "pretrainer.keras"))
        model = BertPretrainer(previous.backbone, mask_selection_length=length, nsp=nsp)
        model.mlm_head.set_weights(previous.mlm_head.get_weights())
        if nsp and previous.nsp:
            model.get_layer("nsp_head").set_weights(previous.get_layer("nsp_head").get_weights())
        return model
    if init_checkpoint:
        encoder = load_encoder(init_checkpoint)
        print(f"   encoder from {init_checkpoint}: {encoder.num_layers} layers, hidden "
              f"{encoder.hidden_dim}; MLM{' and NSP' if nsp else ''} head(s) initialised fresh")
    else:
        encoder = build_encoder(config.model, vocabulary_size)
    if config.model.max_sequence_length > encoder.max_sequence_length:
        raise ConfigError(f"model.max_sequence_length={config.model.max_sequence_length} exceeds the "
                          f"encoder's position table ({encoder.max_sequence_length})")
    return BertPretrainer(encoder, mask_selection_length=length, nsp=nsp)


def run_pretraining(config: PretrainConfig, data_dir: str, output_dir: str,
                    init_checkpoint: str | None = None,
                    strategy: tf.distribute.Strategy | None = None, overwrite: bool = False) -> dict:
    """Trains, evaluates on held-out documents and writes the outputs; returns metrics.

    A folder that holds a finished run is left as it is and its metrics are returned,
    unless `overwrite`; a run killed part-way resumes from its last backup.

    Example:
        >>> from kerasbert.config import load_config
        >>> config = load_config(PretrainConfig, None, ["train.head_warmup_steps=10"])  # warm-up needs a checkpoint
        >>> run_pretraining(config, "../shared/data", f"{tmp_path}/tiny")  # checked before any data is read
        Traceback (most recent call last):
        ...
        kerasbert.errors.ConfigError: train.head_warmup_steps trains fresh heads on a pretrained encoder and needs --init_checkpoint. Received: no --init_checkpoint
    """
    with mixed_precision(config.train.mixed_precision):
        return _pretrain(config, data_dir, output_dir, init_checkpoint, strategy, overwrite)


def _pretrain(config: PretrainConfig, data_dir: str, output_dir: str, init_checkpoint: str | None,
              strategy: tf.distribute.Strategy | None, overwrite: bool) -> dict:
    if config.train.head_warmup_steps and not init_checkpoint:
        raise ConfigError("train.head_warmup_steps trains fresh heads on a pretrained encoder and "
                          "needs --init_checkpoint. Received: no --init_checkpoint")
    strategy = strategy or tf.distribute.get_strategy()
    run = TrainingRun(config, output_dir, RUN_OUTPUTS, overwrite)
    if run.finished is not None:
        return run.finished
    train = config.train

    run.stage(f"reading corpora {list(config.data.sources)} from {data_dir}")
    documents, sources = load_labelled_corpora(config.data.sources, data_dir)
    tokenizer = resolve_tokenizer(config, documents, init_checkpoint, output_dir, run.is_chief)
    tokenized = None
    if not config.data.tfrecord_dir or config.data.mlm_bias_prior:
        run.stage(f"tokenizing {sum(map(len, documents))} sentences in {len(documents)} documents")
        tokenized = tokenize_documents(tokenizer, documents)
    train_data = training_data(config, tokenizer, tokenized, sources, run)
    heldout = heldout_pairs(config, tokenizer, data_dir)
    check_enough_examples(heldout, train.batch_size, f"held-out corpus {config.data.heldout_source}")
    heldout_data = heldout_batches(config, tokenizer, heldout)

    with strategy.scope():
        model = build_model(config, tokenizer.vocabulary_size(), init_checkpoint)
        if config.data.mlm_bias_prior and not (init_checkpoint and has_pretraining_heads(init_checkpoint)):
            set_mlm_bias(model, unigram_log_prior(tokenized, tokenizer.vocabulary_size()))
        run.prepare(model, lambda optimizer: model.compile(**pretraining_compile_args(
            model, optimizer, train.jit_compile, config.data.nsp_loss_weight)), train_data)
    run.stage(f"model: {model.count_params() / 1e6:.2f}M parameters, {strategy.num_replicas_in_sync} replica(s); "
              f"{train.total_steps} steps in {train.num_blocks} blocks of {train.steps_per_block}" + run.resuming())

    # The held-out set is scored after every block (val_* in history.csv and the curves).
    fit = run.fit(model, train_data, validation_data=heldout_data)
    run.stage(f"evaluating on held-out {config.data.heldout_source} ({len(heldout)} examples)")
    metrics = {**heldout_metrics(model, heldout_data), **run_metrics(config, model, fit, strategy),
               "heldout_examples": len(heldout), "init_checkpoint": init_checkpoint or ""}
    if run.is_chief:
        write_outputs(model, tokenizer, metrics, output_dir, train.steps_per_block)
    run.stage(f"done: mlm_accuracy={metrics['mlm_accuracy']:.3f} nsp_accuracy="
              f"{metrics['nsp_accuracy'] if metrics['nsp_accuracy'] is None else round(metrics['nsp_accuracy'], 3)}"
              f" weights_fingerprint={metrics['weights_fingerprint']:.6f} -> {output_dir}")
    return metrics


def training_data(config: PretrainConfig, tokenizer, tokenized, sources, run: TrainingRun) -> tf.data.Dataset:
    """The training batches from the run's resume step: from pre-made shards
    (`data.tfrecord_dir`) or from pairs made of the tokenized documents; each worker reads
    its own share."""
    if config.data.tfrecord_dir:
        run.stage(f"reading pre-made examples from {config.data.tfrecord_dir}")
        examples = tfrecord_dataset(config.data.tfrecord_dir, seed=config.train.seed)
    else:
        pairs = training_pairs(config, tokenized, sources)
        check_enough_examples(pairs, config.train.batch_size, f"corpora {list(config.data.sources)}")
        nsp_pairs = [p for p in pairs if p["nsp_weight"] > 0]
        print(f"   {len(pairs)} examples ({len(nsp_pairs)} NSP pairs, "
              f"{np.mean([p['nsp_label'] for p in nsp_pairs]) if nsp_pairs else 0:.3f} true-next)")
        examples = examples_dataset(pairs)
    batches = training_batches(config, tokenizer, examples, skip_batches=run.start_step)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)


def heldout_metrics(model: BertPretrainer, heldout_data: tf.data.Dataset) -> dict:
    """Held-out MLM (and NSP) accuracy and loss."""
    results = model.evaluate(heldout_data, return_dict=True, verbose=0)
    return {
        "mlm_accuracy": results["mlm_accuracy"],
        "mlm_loss": results.get("mlm_loss", results["loss"]),  # "loss" when MLM is the only output
        "nsp_accuracy": results.get("nsp_accuracy"),
        "nsp_loss": results.get("nsp_loss"),
    }


def run_metrics(config: PretrainConfig, model: BertPretrainer, fit: FitResult, strategy) -> dict:
    """Steps, speed and size of the run, and a fingerprint of its weights."""
    return {
        "train_steps": int(model.optimizer.iterations.numpy()),
        "examples_per_second": fit.examples_per_second,
        "tokens_per_second": fit.examples_per_second * config.model.max_sequence_length,
        "train_seconds": fit.train_seconds,
        "parameters": model.count_params(),
        "replicas": strategy.num_replicas_in_sync,
        "skipped_nonfinite_batches": fit.skipped_nonfinite_batches,
        # Sum of squares of all weights: equal on workers that trained in sync.
        "weights_fingerprint": float(sum(np.sum(np.square(w)) for w in model.get_weights())),
    }


def write_outputs(model: BertPretrainer, tokenizer, metrics: dict, output_dir: str,
                  steps_per_block: int) -> None:
    """The run's files, then metrics.json, which marks the run finished (`mark_finished`)."""
    check_finite_weights(model, f"writing the run's outputs to {output_dir}")
    encoder_dir = os.path.join(output_dir, "encoder")
    model.backbone.save_to_preset(encoder_dir)
    tokenizer.save_to_preset(encoder_dir)
    vocab_path = os.path.join(output_dir, "vocab.txt")
    if not os.path.exists(vocab_path):
        tokenization.write_vocabulary(tokenizer.get_vocabulary(), vocab_path)
    model.save(os.path.join(output_dir, "pretrainer.keras"))
    history = os.path.join(output_dir, "history.csv")
    if os.path.exists(history):
        plot_curves(history, os.path.join(output_dir, "curves.png"), "pretraining (MLM + NSP)",
                    steps_per_block)
    mark_finished(output_dir, metrics)
