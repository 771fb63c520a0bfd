"""One multitask fine-tuning run: task files -> shared encoder + a head per task -> dev metrics.

Output folder (chief only), for the config's `tasks` (sst, para, sts unless it says):
    config.json            resolved FinetuneConfig, with the tasks as declared
    model.keras            the fine-tuned model at its best dev `overall` (all heads; of the
                           trained tasks only if a `schedule.shares` entry is 0), with its
                           tasks' classes (or score ranges) as the training files gave them
    encoder/               the fine-tuned encoder + tokenizer as a keras-hub preset
    predictions/           <task>-dev.tsv: id, label, prediction
    history.csv, logs/     per-block train losses and dev metrics; TensorBoard
    steps.csv              the training losses every tenth of a block
    curves.png             losses and dev metrics per step
    report.md              each task's metrics, per-class (per entity type for a tags task)
                           precision/recall/F1, the plots
    <task>_confusion.png   confusion matrix on dev, per classes or pair_classes task
    metrics.json           each task's metrics (sst_accuracy, para_accuracy, para_f1,
                           sts_pearson, sts_spearman; ner_f1, ner_precision, ner_recall,
                           ner_f1_<TYPE>; squad_f1, squad_exact_match), overall; per_class:
                           precision, recall, F1 and support of each class of the classes
                           kinds, and of each entity type of a tags task

Example (a run of its own: `run_finetuning` below):
    >>> from kerasbert.config import load_config
    >>> config = load_config(FinetuneConfig, "pipelines/configs/finetune_tiny.json")  # sst, para, sts
    >>> [name for name in run_outputs(config) if name.endswith(".png")]  # a confusion matrix per classes task
    ['curves.png', 'sst_confusion.png']
"""

from __future__ import annotations

import csv
import json
import os

import keras
import numpy as np
import tensorflow as tf

from kerasbert.config import FinetuneConfig
from kerasbert.data.rows import DataError
from kerasbert.data.task_files import read_task_file, read_training_file, sample_examples
from kerasbert.durable import publish, write_json
from kerasbert.finetuning.data import TaskPreprocessor, interleave_tasks, resolve_path, task_dataset
from kerasbert.finetuning.evaluation import headline_keys, overall_score, per_class, score_examples, task_labels
from kerasbert.finetuning.load import load_finetuned
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.finetuning.report import write_run_report
from kerasbert.models.encoder import load_encoder
from kerasbert.plots import plot_confusion, plot_curves
from kerasbert.tasks import Task
from kerasbert.tokenization import load_tokenizer
from kerasbert.training.finite import check_finite_weights
from kerasbert.training.run import TrainingRun
from kerasbert.training.run_folder import mark_finished

def run_outputs(config: FinetuneConfig) -> tuple[str, ...]:
    """What a run writes into its output folder (the layout above); --overwrite removes these."""
    return ("config.json", "model.keras", "encoder", "predictions", "best.weights.h5", "best.weights.h5.json",
            "backup", "history.csv", "steps.csv", "logs", "curves.png", "metrics.json", "report.md",
            *(f"{name}_confusion.png" for name, task in config.tasks.items() if task.family.has_confusion(task)))


def evaluate_all(model, preprocessor, dev: dict) -> tuple[dict, dict]:
    """Metrics (with overall) and predictions of every task's dev set ({task: examples})."""
    metrics, predictions = {}, {}
    for task, examples in dev.items():
        scores, predictions[task] = score_examples(model, preprocessor, task, examples)
        metrics.update(scores)
    metrics["overall"] = overall_score(metrics, [model.task_specs[task] for task in dev])
    return metrics, predictions


def task_path(data_dir: str, task: Task, which: str) -> str:
    """The path of `task`'s `which` ("train_file", "dev_file"), found as `resolve_path` finds it;
    DataError for a task declared without one."""
    path = getattr(task, which)
    if not path:
        raise DataError(f"task {task.name!r} has no {which}: give it one in its declaration, or "
                        f"--set data.{which}s.{task.name}=PATH")
    return resolve_path(data_dir, path)


def load_dev_sets(config: FinetuneConfig, tasks: dict, data_dir: str) -> dict:
    """{task: dev examples} of `tasks` ({name: Task}, classes known) from the config's dev
    files, a seeded `data.max_dev_examples` of each."""
    return {name: sample_examples(read_task_file(task, task_path(data_dir, config.tasks[name], "dev_file")),
                                  config.data.max_dev_examples, config.train.seed) for name, task in tasks.items()}


def check_dev_sets(config: FinetuneConfig, tasks: dict, dev: dict, preprocessor, data_dir: str) -> None:
    """DataError, before any training, for a dev example its task's export would refuse."""
    for name, task in tasks.items():
        task.family.check_scored(task, preprocessor, dev[name], task_path(data_dir, config.tasks[name], "dev_file"))


def load_task_data(config: FinetuneConfig, data_dir: str) -> tuple[dict, dict, dict]:
    """({task: Task}, {task: training examples}, {task: dev examples}) of a config's tasks:
    each task's classes (or score range) taken from its training file where its declaration
    leaves them out, every file checked before any training (a seeded `data.max_train_examples`
    and `data.max_dev_examples` of each)."""
    tasks, train, dev = {}, {}, {}
    data, seed = config.data, config.train.seed
    for name, task in config.tasks.items():
        task, result = read_training_file(task, task_path(data_dir, task, "train_file"))
        if len(result.examples) < config.train.batch_size:
            raise DataError(f"{result.path}: {len(result.examples)} training examples of task {name!r}, fewer "
                            f"than one batch (train.batch_size={config.train.batch_size})")
        tasks[name], train[name] = task, sample_examples(result, data.max_train_examples, seed)
        dev.update(load_dev_sets(config, {name: task}, data_dir))
        print(f"   {name} ({task.kind}{task.family.describe(task)}): {len(train[name])} train, {len(dev[name])} dev")
    return tasks, train, dev


class DevEvaluation(keras.callbacks.Callback):
    """After each block: dev metrics into the logs; the best `overall` weights kept on disk.

    With `trained_tasks`, "best" counts only those tasks' parts of `overall`: the heads of
    tasks the run never trains would otherwise pick the block. The best score is kept beside
    the weights (`<best_path>.json`), so a resumed run keeps a better block from before.
    """

    def __init__(self, preprocessor, dev: dict, best_path: str, trained_tasks: tuple[Task, ...]):
        super().__init__()
        self.preprocessor, self.dev, self.best_path = preprocessor, dev, best_path
        self.trained_tasks = trained_tasks
        self.best = -np.inf
        if os.path.exists(best_path) and os.path.exists(best_path + ".json"):  # a resumed run
            with open(best_path + ".json") as f:
                self.best = json.load(f)["score"]
        self.best_result: tuple[dict, dict] | None = None  # (metrics, predictions) of the best block

    def best_block(self) -> int | None:
        """The block whose weights are kept (read back from disk, so a resumed run knows it)."""
        if not os.path.exists(self.best_path + ".json"):
            return None
        with open(self.best_path + ".json") as f:
            return json.load(f)["block"]

    def on_epoch_end(self, epoch, logs=None):
        metrics, predictions = evaluate_all(self.model, self.preprocessor, self.dev)
        print("   dev: " + "  ".join(f"{k}={v:.3f}" for k, v in metrics.items()), flush=True)
        if logs is not None:
            logs.update({f"dev_{k}": v for k, v in metrics.items()})
        score = overall_score(metrics, self.trained_tasks)
        if score > self.best:
            self.best, self.best_result = score, (dict(metrics), predictions)
            partial = self.best_path + ".partial.weights.h5"
            check_finite_weights(self.model, f"keeping block {epoch + 1} as the best weights")
            self.model.save_weights(partial)
            publish(partial, self.best_path)
            write_json(self.best_path + ".json", {"score": score, "block": epoch + 1})


def write_predictions(path: str, task: Task, examples, predictions) -> None:
    """id, label, prediction per dev example: a class name (the served one) or a score; a tags
    task's tags (the sentence's first line as its id), a span task's reference answers (joined
    by " | ") and answer."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["id", "label", "prediction"])
        for example, label, prediction in zip(examples, task_labels(task, examples), predictions):
            writer.writerow(task.family.prediction_row(task, example, label, prediction))


def run_finetuning(config: FinetuneConfig, data_dir: str, output_dir: str, init_checkpoint: str,
                   strategy: tf.distribute.Strategy | None = None, overwrite: bool = False) -> dict:
    """Trains, keeps the block with the best dev `overall`, writes the outputs; returns metrics.

    A folder that holds a finished run is left as it is and its metrics are returned,
    unless `overwrite`; a run killed part-way resumes from its last backup.

    Example:
        >>> from kerasbert.config import load_config
        >>> config = load_config(FinetuneConfig, "pipelines/configs/finetune_tiny.json", [  # 2 steps of sst here
        ...     "tasks=sst", "data.max_train_examples=8", "data.max_dev_examples=8", "data.max_sequence_length=16",
        ...     "train.batch_size=4", "train.total_steps=2", "train.steps_per_block=2"])
        >>> metrics = run_finetuning(config, data_dir, f"{tmp_path}/ft", f"{run_dir}/encoder")  # or minilm_checkpoint()
        == reading task files ...
        == done: sst_accuracy=... -> .../ft [...]
        >>> metrics["train_steps"], metrics["dev_examples"], 0 <= metrics["overall"] <= 1
        (2, {'sst': 8}, True)
        >>> sorted(os.listdir(f"{tmp_path}/ft"))  # the layout above
        ['best.weights.h5', 'best.weights.h5.json', 'config.json', 'curves.png', 'encoder', 'history.csv', 'logs',
         'metrics.json', 'model.keras', 'predictions', 'report.md', 'sst_confusion.png', 'steps.csv']
    """
    strategy = strategy or tf.distribute.get_strategy()
    run = TrainingRun(config, output_dir, run_outputs(config), overwrite)
    if run.finished is not None:
        return run.finished
    train, heads, schedule = config.train, config.heads, config.schedule

    tokenizer = load_tokenizer(init_checkpoint)
    preprocessor = TaskPreprocessor(tokenizer, config.data.max_sequence_length, heads.pair_encoder,
                                    trim=not train.jit_compile, tasks=config.tasks)  # trim: XLA wants one shape
    run.stage(f"reading task files (working folder, then {data_dir})")
    tasks, train_examples, dev = load_task_data(config, data_dir)
    check_dev_sets(config, tasks, dev, preprocessor, data_dir)
    batches = training_batches(config, tasks, train_examples, preprocessor).skip(run.start_step) \
        .prefetch(tf.data.AUTOTUNE)

    carried = carried_heads(config, tasks, init_checkpoint)
    with strategy.scope():
        model = build_model(config, tasks, init_checkpoint, carried)
        last = tasks[list(tasks)[-1]]  # a batch of any task builds every head
        run.prepare(model, lambda optimizer: model.compile(optimizer=optimizer, jit_compile=train.jit_compile),
                    batches, build=lambda: model(next(iter(task_dataset(last, dev[last.name][:2], preprocessor, 2,
                                                                         False)))[0]), heads="task heads")
    heads_text = ", ".join(f"{heads.encoder_of(t)}-encoder {t.head}" if heads.encoder_of(t) else t.head
                           for t in tasks.values())
    run.stage(f"model: {model.count_params() / 1e6:.1f}M parameters, heads: {heads_text}; {schedule.sampling} "
              f"sampling; {train.total_steps} steps in {train.num_blocks} blocks" + run.resuming())

    best_path = os.path.join(output_dir, "best.weights.h5")
    dev_evaluation = DevEvaluation(preprocessor, dev, best_path, tuple(tasks[t] for t in config.trained_tasks))
    fit = run.fit(model, batches, evaluation=(dev_evaluation,), checkpoint=False)
    trained_steps = int(model.optimizer.iterations.numpy())  # before the best block's weights reload it
    metrics, predictions = best_block_results(model, preprocessor, dev, dev_evaluation, run)
    best_block = dev_evaluation.best_block()
    metrics.update(train_steps=trained_steps,
                   best_step=trained_steps if best_block is None else best_block * train.steps_per_block,
                   dev_examples={task: len(examples) for task, examples in dev.items()},
                   train_seconds=fit.train_seconds,
                   examples_per_second=fit.examples_per_second,
                   skipped_nonfinite_batches=fit.skipped_nonfinite_batches,
                   init_checkpoint=init_checkpoint, pair_encoder=heads.pair_encoder,
                   # the shipped similarity task's, as before its encoder was its own (issue 86)
                   sts_encoder=heads.encoder_of(tasks["sts"]) if "sts" in tasks else heads.pair_encoder)
    if run.is_chief:
        write_outputs(model, tokenizer, dev, predictions, metrics, output_dir, train.steps_per_block)
    run.stage("done: " + "  ".join(f"{k}={metrics[k]:.3f}" for k in headline_keys(tasks.values()))
              + f" -> {output_dir}")
    return metrics


def training_batches(config: FinetuneConfig, tasks: dict, examples: dict,
                     preprocessor: TaskPreprocessor) -> tf.data.Dataset:
    """The endless stream of single-task training batches of the run's tasks ({name: Task},
    {name: examples}), drawn as `schedule.sampling` says (an untrained task, share 0, still
    takes its place in the draw)."""
    train, data, schedule = config.train, config.data, config.schedule
    sizes = {name: len(examples[name]) for name in tasks}
    train_sets = {name: task_dataset(task, examples[name], preprocessor, train.batch_size, True, train.seed,
                                     data.group_by_length, data.swap_pairs) for name, task in tasks.items()}
    return interleave_tasks(train_sets, sizes, schedule.sampling, schedule.temperature, train.seed,
                            schedule.shares)


def build_model(config: FinetuneConfig, tasks: dict, init_checkpoint: str, carried: dict | None = None) -> MultitaskBert:
    """The config's multitask model, with a head per task of `tasks` ({name: Task}, their
    classes known), on the encoder of `init_checkpoint`; the heads in `carried` ({name:
    weights}, `carried_heads`) start from those weights, the others new."""
    heads, schedule = config.heads, config.schedule
    model = MultitaskBert(
        load_encoder(init_checkpoint), tasks=tuple(tasks.values()), pair_encoder=heads.pair_encoder,
        unpadded=False if config.train.jit_compile else None,  # XLA compiles one shape
        pooling=heads.pooling, dropout=heads.dropout, layerwise_lr_decay=schedule.layerwise_lr_decay,
        hold_idle_heads=schedule.hold_idle_heads,
        task_weights=[schedule.loss_weights[task] for task in config.tasks])
    if carried:
        model.build()
        for name, weights in carried.items():
            model.head(name).set_weights(weights)
    return model


def new_head_reason(init: MultitaskBert, task: Task, heads) -> str:
    """Why the init run's head of `task.name` is not this run's task ("" when it is)."""
    old = init.task_specs[task.name]
    difference = task.family.head_difference(old, task)
    if difference:
        return difference
    if task.family.pooled and (init.pooling, init.encoder_of(task.name)) != (heads.pooling, heads.encoder_of(task)):
        return f"its head reads {init.pooling} pooling ({init.encoder_of(task.name) or 'one text'})"
    return ""


def carried_heads(config: FinetuneConfig, tasks: dict, init_checkpoint: str) -> dict:
    """{name: [kernel, bias]} of the heads a run continues: where `init_checkpoint` is a
    fine-tuning or imported run (it has model.keras), each task of `tasks` ({name: Task}) of
    the same name, kind, classes or tags (columns put in this run's order) and score range,
    a sentence head also reading the same pooling and encoder. The others start new, said why."""
    if not os.path.isfile(os.path.join(init_checkpoint, "model.keras")):
        return {}  # an encoder checkpoint: every head is new
    init, carried = load_finetuned(init_checkpoint)[1], {}
    for name in (name for name in tasks if name in init.task_specs):
        reason = new_head_reason(init, tasks[name], config.heads)
        if reason:
            print(f"   {name}: a new head, {init_checkpoint}'s {name} is another task: {reason}")
            continue
        kernel, bias = init.head(name).get_weights()  # (width, units), (units,)
        order = tasks[name].family.head_order(init.task_specs[name], tasks[name])
        carried[name] = [kernel[:, order], bias[order]]
        print(f"   {name}: its head from {init_checkpoint}")
    return carried


def best_block_results(model, preprocessor, dev: dict, dev_evaluation: DevEvaluation,
                       run: TrainingRun) -> tuple[dict, dict]:
    """Loads the best block's weights into `model`; returns its dev metrics and predictions."""
    if os.path.exists(dev_evaluation.best_path):
        model.load_weights(dev_evaluation.best_path)
    if dev_evaluation.best_result is not None:  # scored in this run: reuse, don't re-score
        return dev_evaluation.best_result
    run.stage("scoring the best model on the dev sets")  # resumed after the best block
    return evaluate_all(model, preprocessor, dev)


def write_outputs(model, tokenizer, dev, predictions, metrics, output_dir, steps_per_block) -> None:
    """The run's files, then metrics.json (with each classes task's `per_class` figures added),
    which marks the run finished (`mark_finished`)."""
    check_finite_weights(model, f"writing the run's outputs to {output_dir}")
    # The tasks whose heads read the pooled embedding first, then the token-level ones' (metrics.json's order).
    reports = {name: per_class(task, task_labels(task, dev[name]), predictions[name])
               for name, task in sorted(model.task_specs.items(), key=lambda item: not item[1].family.pooled)
               if name in dev}
    metrics["per_class"] = {name: report for name, report in reports.items() if report is not None}
    os.makedirs(os.path.join(output_dir, "predictions"), exist_ok=True)
    for task, examples in dev.items():
        write_predictions(os.path.join(output_dir, "predictions", f"{task}-dev.tsv"), model.task_specs[task],
                          examples, predictions[task])
    confusion = {}
    for name in dev:
        task = model.task_specs[name]
        if task.family.has_confusion(task):
            confusion[name] = f"{name}_confusion.png"
            plot_confusion([e.label for e in dev[name]], predictions[name].argmax(-1), task.family.head_names(task),
                           os.path.join(output_dir, f"{name}_confusion.png"),
                           f"{task.title}: {len(dev[name])} dev examples"
                           + (f" that chose step {metrics['best_step']}" if "best_step" in metrics else "")
                           + f" (accuracy {metrics[task.metric_names[0]]:.3f})")
    model.save(os.path.join(output_dir, "model.keras"))
    model.backbone.save_to_preset(os.path.join(output_dir, "encoder"))
    tokenizer.save_to_preset(os.path.join(output_dir, "encoder"))
    history = os.path.join(output_dir, "history.csv")
    if os.path.exists(history):
        plot_curves(history, os.path.join(output_dir, "curves.png"), "multitask fine-tuning", steps_per_block)
    write_run_report(output_dir, model.task_specs, metrics, confusion)
    mark_finished(output_dir, metrics)
