"""A run's output folder: recognise a finished run, or clear one for `--overwrite`.

A run writes `metrics.json` last, so a folder that holds it holds a finished run. Started
again, the same command then trains nothing and returns the recorded metrics; a run
killed before that point resumes from its backup instead (`kerasbert.training.run.TrainingRun`).
`overwrite=True` removes the run's own outputs, named by the caller, and nothing else
in the folder, so the next run starts from scratch.

Example:
    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> mark_finished(run, {"mlm_accuracy": 0.12, "train_steps": 60})
    >>> check_output_dir(run, ("metrics.json", "backup"), overwrite=False)
    == ... holds a finished run (metrics.json, 60 steps): nothing to train. ...
    {'mlm_accuracy': 0.12, 'train_steps': 60}
    >>> check_output_dir(run, ("metrics.json", "backup"), overwrite=True)
    == --overwrite: removed the previous run's metrics.json from ...
"""

from __future__ import annotations

import json
import os
import shutil

from kerasbert.config import from_dict, to_dict
from kerasbert.durable import fsync_tree, write_json
from kerasbert.errors import ConfigError, DataError, KerasbertError

METRICS_FILE = "metrics.json"


def finished_metrics(output_dir: str) -> dict | None:
    """The metrics of the finished run in `output_dir`, or None if none finished there."""
    path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as error:
        raise DataError(f"{path}: not a readable metrics file ({error}); the run that wrote it "
                        "did not finish cleanly. Pass --overwrite to train again from scratch.") from None


def mark_finished(output_dir: str, metrics: dict) -> None:
    """Syncs every file the run wrote to the disk, then writes `metrics.json` through
    `durable.write_json`: after a power loss the folder holds a finished run only if its
    outputs are whole. Raises NonFiniteError for a metric that is NaN or infinite.

    Example:
        >>> import tempfile
        >>> run = tempfile.mkdtemp()
        >>> mark_finished(run, {"mlm_accuracy": 0.12, "train_steps": 60})
        >>> finished_metrics(run)
        {'mlm_accuracy': 0.12, 'train_steps': 60}
    """
    fsync_tree(output_dir)
    write_json(os.path.join(output_dir, METRICS_FILE), metrics)


def clear_outputs(output_dir: str, names: tuple[str, ...]) -> list[str]:
    """Removes the files and folders `names` from `output_dir`; returns those it removed."""
    removed = []
    for name in names:
        path = os.path.join(output_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
        else:
            continue
        removed.append(name)
    return removed


def config_changes(saved: dict, new: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for every dotted key whose value differs between two configs.

    Example:
        >>> config_changes({"train": {"total_steps": 60}}, {"train": {"total_steps": 80}})
        ['train.total_steps: 60 -> 80']
    """
    changes = []
    for key in sorted(set(saved) | set(new), key=str):
        old, value = saved.get(key, "(absent)"), new.get(key, "(absent)")
        if isinstance(old, dict) and isinstance(value, dict):
            changes += config_changes(old, value, f"{prefix}{key}.")
        elif old != value:
            changes.append(f"{prefix}{key}: {json.dumps(old)} -> {json.dumps(value)}")
    return changes


def check_output_dir(output_dir: str, outputs: tuple[str, ...], overwrite: bool,
                     is_chief: bool = True, config=None) -> dict | None:
    """Before a run: the finished run's metrics if there is one to keep, else None.

    With `overwrite`, the chief first removes `outputs` (the run's own files) from the folder.
    A finished run whose config.json differs from `config` (a PretrainConfig or FinetuneConfig)
    is an error naming the keys that differ: the run asked for is not the one in the folder.
    The saved config is compared as this version reads it, so keys an earlier version wrote
    (every task with every family's settings) are no change.
    """
    if overwrite:
        if is_chief and os.path.isdir(output_dir):
            removed = clear_outputs(output_dir, outputs)
            if removed:
                print(f"== --overwrite: removed the previous run's {', '.join(removed)} from {output_dir}",
                      flush=True)
        return None
    metrics = finished_metrics(output_dir)
    saved_path = os.path.join(output_dir, "config.json")
    if metrics is not None and config is not None and os.path.isfile(saved_path):
        changes = config_changes(saved_as_today(saved_path, type(config)), json.loads(json.dumps(to_dict(config))))
        if changes:
            raise ConfigError(f"{output_dir} holds a finished run with another config ({'; '.join(changes)}). "
                              "Pass --overwrite to train it again with this config, or choose another "
                              "--output_dir.")
    if metrics is not None:
        steps = metrics.get("train_steps")
        print(f"== {output_dir} holds a finished run ({METRICS_FILE}"
              + (f", {steps} steps" if steps is not None else "") + "): nothing to train. "
              "Pass --overwrite to train it again from scratch.", flush=True)
    return metrics


def saved_as_today(path: str, config_class) -> dict:
    """A run folder's config.json as this version loads and writes it (as saved where it no longer loads)."""
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    try:
        return json.loads(json.dumps(to_dict(from_dict(config_class, saved))))
    except KerasbertError:
        return saved


def check_free_space(output_dir: str, parameters: int, copies: int = 3) -> None:
    """Raises before training when `output_dir` cannot hold the backups of a model of
    `parameters` weights: `copies` sets of the weights and the optimizer's two moments (two
    kept backups and one being written).

    Example:
        >>> check_free_space(".", parameters=22_713_216)  # MiniLM: 0.8 GB, there
        >>> check_free_space(".", parameters=10**15)
        Traceback (most recent call last):
        ...
        kerasbert.errors.KerasbertError: .: ... MB free, but this run's backups need about 36000000000.0 MB ...
    """
    needed = copies * 3 * 4 * parameters  # float32 weights, Adam's m and v
    free = shutil.disk_usage(output_dir).free
    if free < needed:
        raise KerasbertError(f"{output_dir}: {free / 1e6:.1f} MB free, but this run's backups need about "
                             f"{needed / 1e6:.1f} MB ({parameters:,} parameters with the optimizer "
                             "state, 3 copies). Free some space or choose another --output_dir.")
