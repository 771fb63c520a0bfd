"""One multitask fine-tuning run: task files -> shared encoder + 3 heads -> dev metrics.

Output folder (chief only):
    config.json            resolved FinetuneConfig
    model.keras            the fine-tuned model at its best dev `overall` (all heads; of the
                           trained tasks only if a `schedule.*_share` is 0)
    encoder/               the fine-tuned encoder + tokenizer as a keras-hub preset
    predictions/           {sst,para,sts}-dev.tsv: id, label, prediction
    history.csv, logs/     per-block train losses and dev metrics; TensorBoard
    curves.png             losses and dev metrics per step
    sst_confusion.png      sentiment confusion matrix on dev
    metrics.json           sst_accuracy, para_accuracy, para_f1, sts_pearson, sts_spearman, overall

Example:
    >>> config = load_config(FinetuneConfig, "pipelines/configs/finetune_tiny.json")
    >>> run_finetuning(config, "../shared/data", "runs/ft", init_checkpoint=minilm_path)
"""

from __future__ import annotations

import csv
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

from kerasbert.config import FinetuneConfig, save_config
from kerasbert.console import stage
from kerasbert.finetuning.data import (TaskPreprocessor, interleave_tasks, load_examples, resolve_path,
                                       task_dataset)
from kerasbert.finetuning.evaluation import overall_score, plot_confusion, predict_examples, task_metrics
from kerasbert.finetuning.model import TASKS, MultitaskBert
from kerasbert.models.encoder import load_encoder
from kerasbert.tokenization import load_tokenizer
from kerasbert.training.backup import find_backup, restore
from kerasbert.training.callbacks import Throughput, plot_curves, training_callbacks
from kerasbert.training.head_warmup import warm_up_heads
from kerasbert.training.optim import build_optimizer, make_optimizer
from kerasbert.training.run_folder import check_free_space, check_output_dir
from kerasbert.training.strategy import worker_info

# What a run writes into its output folder (the layout above); --overwrite removes these.
RUN_OUTPUTS = ("config.json", "model.keras", "encoder", "predictions", "best.weights.h5", "best.weights.h5.json",
               "backup", "history.csv", "logs", "curves.png", "sst_confusion.png", "metrics.json")


def evaluate_all(model, preprocessor, dev: dict) -> tuple[dict, dict]:
    """Metrics (with overall) and predictions of every task's dev set ({task: examples})."""
    metrics, predictions = {}, {}
    for task, examples in dev.items():
        predictions[task] = predict_examples(model, preprocessor, task, examples)
        metrics.update(task_metrics(task, [e.label for e in examples], predictions[task]))
    metrics["overall"] = overall_score(metrics)
    return metrics, predictions


def load_dev_sets(config: FinetuneConfig, data_dir: str) -> dict:
    """{task: dev examples} of a config's dev files (a seeded `data.max_dev_examples` of each)."""
    return {task: load_examples(task, resolve_path(data_dir, getattr(config.data, f"{task}_dev")),
                                config.data.max_dev_examples, config.train.seed) for task in TASKS}


class DevEvaluation(keras.callbacks.Callback):
    """After each block: dev metrics into the logs; the best `overall` weights kept on disk.

    With `trained_tasks`, "best" counts only those tasks' parts of `overall`: the heads of
    tasks the run never trains would otherwise pick the block. The best score is kept beside
    the weights (`<best_path>.json`), so a resumed run keeps a better block from before.
    """

    def __init__(self, preprocessor, dev: dict, best_path: str, trained_tasks: tuple[str, ...] = TASKS):
        super().__init__()
        self.preprocessor, self.dev, self.best_path = preprocessor, dev, best_path
        self.trained_tasks = trained_tasks
        self.best = -np.inf
        if os.path.exists(best_path) and os.path.exists(best_path + ".json"):  # a resumed run
            with open(best_path + ".json") as f:
                self.best = json.load(f)["score"]
        self.best_result: tuple[dict, dict] | None = None  # (metrics, predictions) of the best block

    def on_epoch_end(self, epoch, logs=None):
        metrics, predictions = evaluate_all(self.model, self.preprocessor, self.dev)
        print("   dev: " + "  ".join(f"{k}={v:.3f}" for k, v in metrics.items()), flush=True)
        if logs is not None:
            logs.update({f"dev_{k}": v for k, v in metrics.items()})
        score = overall_score(metrics, self.trained_tasks)
        if score > self.best:
            self.best, self.best_result = score, (dict(metrics), predictions)
            partial = self.best_path + ".partial.weights.h5"
            self.model.save_weights(partial)
            os.replace(partial, self.best_path)
            with open(self.best_path + ".json.partial", "w") as f:
                json.dump({"score": score, "block": epoch + 1}, f)
            os.replace(self.best_path + ".json.partial", self.best_path + ".json")


def write_predictions(path: str, examples, predictions: np.ndarray) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["id", "label", "prediction"])
        for example, prediction in zip(examples, predictions):
            value = int(np.argmax(prediction)) if np.ndim(prediction) else round(float(prediction), 6)
            writer.writerow([example.uid, example.label, value])


def run_finetuning(config: FinetuneConfig, data_dir: str, output_dir: str, init_checkpoint: str,
                   strategy: tf.distribute.Strategy | None = None, overwrite: bool = False) -> dict:
    """Trains, keeps the block with the best dev `overall`, writes the outputs; returns metrics.

    A folder that holds a finished run is left as it is and its metrics are returned,
    unless `overwrite`; a run killed part-way resumes from its last backup.

    Example:
        >>> config = load_config(FinetuneConfig, "pipelines/configs/finetune_tiny.json")
        >>> run_finetuning(config, "../shared/data", "runs/ft", minilm_checkpoint())["overall"]
    """
    started = time.perf_counter()
    strategy = strategy or tf.distribute.get_strategy()
    _, is_chief = worker_info()
    finished = check_output_dir(output_dir, RUN_OUTPUTS, overwrite, is_chief)
    if finished is not None:
        return finished
    train, data, heads, schedule = config.train, config.data, config.heads, config.schedule
    keras.utils.set_random_seed(train.seed)
    os.makedirs(output_dir, exist_ok=True)
    if is_chief:
        save_config(config, os.path.join(output_dir, "config.json"))

    tokenizer = load_tokenizer(init_checkpoint)
    preprocessor = TaskPreprocessor(tokenizer, data.max_sequence_length, heads.pair_encoder,
                                    trim=not config.train.jit_compile,  # XLA wants one shape
                                    sts_encoder=heads.sts_encoder)
    stage(f"reading task files under {data_dir}")
    dev = load_dev_sets(config, data_dir)
    train_sets, sizes = {}, {}
    for task in TASKS:
        examples = load_examples(task, resolve_path(data_dir, getattr(data, f"{task}_train")),
                                 data.max_train_examples, train.seed)
        if len(examples) < train.batch_size:
            raise ValueError(f"{task}: {len(examples)} training examples, fewer than one batch "
                             f"(train.batch_size={train.batch_size})")
        sizes[task] = len(examples)
        train_sets[task] = task_dataset(task, examples, preprocessor, train.batch_size, True, train.seed,
                                        data.group_by_length, data.swap_pairs)
        print(f"   {task}: {len(examples)} train, {len(dev[task])} dev")
    # Weights, optimizer state and the step the data resumes at all come from this one file.
    backup = find_backup(os.path.join(output_dir, "backup"))
    start_block = backup.blocks_done if backup else 0
    start_step = start_block * train.steps_per_block
    batches = interleave_tasks(train_sets, sizes, schedule.sampling, schedule.temperature, train.seed,
                         schedule.shares)
    batches = batches.skip(start_step).prefetch(tf.data.AUTOTUNE)

    with strategy.scope():
        model = MultitaskBert(
            load_encoder(init_checkpoint), pair_encoder=heads.pair_encoder,
            sts_encoder=heads.sts_encoder, pooling=heads.pooling,
            dropout=heads.dropout, sts_loss=heads.sts_loss, para_mnrl_weight=heads.para_mnrl_weight,
            mnrl_scale=heads.mnrl_scale, layerwise_lr_decay=schedule.layerwise_lr_decay,
            hold_idle_heads=schedule.hold_idle_heads,
            task_weights=(schedule.sst_weight, schedule.para_weight, schedule.sts_weight))
        if train.head_warmup_steps and start_step == 0:  # a resumed run restores warmed heads
            stage(f"training the task heads alone for {train.head_warmup_steps} steps, encoder frozen",
                  started)
            warm_up_heads(model, batches, train.head_warmup_steps, train.head_warmup_learning_rate,
                          lambda optimizer: model.compile(optimizer=optimizer, jit_compile=train.jit_compile),
                          verbose=1 if is_chief else 0)
        model.compile(optimizer=make_optimizer(train), jit_compile=train.jit_compile)
        # Build every head before restoring a backup.
        model(next(iter(task_dataset("sts", dev["sts"][:2], preprocessor, 2, False)))[0])
        build_optimizer(model)
        restore(model, backup)
    if is_chief:
        check_free_space(output_dir, model)
    stage(f"model: {model.count_params() / 1e6:.1f}M parameters, {heads.encoders['para']}-encoder "
          f"paraphrase and {heads.encoders['sts']}-encoder similarity heads, {schedule.sampling} "
          f"sampling; {train.total_steps} steps in {train.num_blocks} "
          f"blocks" + (f"; resuming at step {start_step} from {backup.path}" if backup else ""), started)

    best_path = os.path.join(output_dir, "best.weights.h5")
    throughput = Throughput(train.batch_size)
    dev_evaluation = DevEvaluation(preprocessor, dev, best_path, schedule.trained_tasks)
    callbacks = training_callbacks(output_dir, is_chief, throughput, checkpoint=False,
                                   evaluation=(dev_evaluation,), ema=train.ema_momentum > 0)
    fit_started = time.perf_counter()
    model.fit(batches, initial_epoch=start_block, epochs=train.num_blocks,
              steps_per_epoch=train.steps_per_block, shuffle=False,
              callbacks=callbacks, verbose=1 if is_chief else 0)
    train_seconds = time.perf_counter() - fit_started
    if os.path.exists(best_path):
        model.load_weights(best_path)
    if dev_evaluation.best_result is not None:  # scored in this run: reuse, don't re-score
        metrics, predictions = dev_evaluation.best_result
    else:  # resumed after the best block: score the restored weights
        stage("scoring the best model on the dev sets", started)
        metrics, predictions = evaluate_all(model, preprocessor, dev)
    metrics.update(train_steps=int(model.optimizer.iterations.numpy()), train_seconds=train_seconds,
                   examples_per_second=throughput.examples_per_second(),
                   init_checkpoint=init_checkpoint, pair_encoder=heads.encoders["para"],
                   sts_encoder=heads.encoders["sts"])
    if is_chief:
        write_outputs(model, tokenizer, dev, predictions, metrics, output_dir, train.steps_per_block)
    stage("done: " + "  ".join(f"{k}={metrics[k]:.3f}" for k in
                                ("sst_accuracy", "para_accuracy", "sts_pearson", "overall"))
          + f" -> {output_dir}", started)
    return metrics


def write_outputs(model, tokenizer, dev, predictions, metrics, output_dir, steps_per_block) -> None:
    os.makedirs(os.path.join(output_dir, "predictions"), exist_ok=True)
    for task, examples in dev.items():
        write_predictions(os.path.join(output_dir, "predictions", f"{task}-dev.tsv"), examples,
                          predictions[task])
    sst_labels = [e.label for e in dev["sst"]]
    plot_confusion(sst_labels, predictions["sst"].argmax(-1), os.path.join(output_dir, "sst_confusion.png"),
                   f"SST-5 dev (accuracy {metrics['sst_accuracy']:.3f})")
    model.save(os.path.join(output_dir, "model.keras"))
    model.backbone.save_to_preset(os.path.join(output_dir, "encoder"))
    tokenizer.save_to_preset(os.path.join(output_dir, "encoder"))
    history = os.path.join(output_dir, "history.csv")
    if os.path.exists(history):
        plot_curves(history, os.path.join(output_dir, "curves.png"), "multitask fine-tuning", steps_per_block)
    with open(os.path.join(output_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
