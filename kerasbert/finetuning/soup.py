"""A uniform model soup: one model whose weights are the mean of several fine-tuned runs'.

Runs fine-tuned from the same encoder (different `train.seed`s, say) land close enough
together that the mean of their weights works as a model, and it scores about as well as
averaging their predictions (Wortsman et al. 2022, "Model soups"), but it is one model to
export and serve at the cost of one. The members must share an architecture: pair
encoders, pooling, encoder size, sequence length and vocabulary; their training settings
(seed, steps, learning rate, losses) may differ.

`run_soup` writes the soup as a pipelines.finetune output folder (config.json of the first
member, model.keras, encoder/, predictions/, confusion matrices, metrics.json with `members`),
so pipelines.evaluate and pipelines.export take it like any run.

Example (`run_soup(["runs/seed1", "runs/seed2", "runs/seed3"], "../shared/data", "runs/soup")` writes
one; here a run and its copy, whose soup is the run itself):
    >>> import shutil
    >>> copy = shutil.copytree(run_dir, f"{tmp_path}/seed2")
    >>> config, model, preprocessor = load_soup([run_dir, copy])  # in memory only
    >>> member = load_finetuned(run_dir)[1]
    >>> all(np.allclose(a, b) for a, b in zip(model.get_weights(), member.get_weights()))
    True
    >>> load_soup([run_dir])
    Traceback (most recent call last):
    ...
    kerasbert.errors.ConfigError: a soup needs at least 2 fine-tuned runs. Received: [...]
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from kerasbert.errors import ConfigError, DataError
from kerasbert.config import save_config
from kerasbert.console import stage
from kerasbert.finetuning.load import load_finetuned
from kerasbert.finetuning.evaluation import headline_keys
from kerasbert.finetuning.run import check_dev_sets, evaluate_all, load_dev_sets, write_outputs


def load_soup(model_dirs: list[str]):
    """(config, model, preprocessor) of the soup of pipelines.finetune output folders: the
    first member's config and preprocessor, the members' mean weights."""
    if len(model_dirs) < 2:
        raise ConfigError(f"a soup needs at least 2 fine-tuned runs. Received: {list(model_dirs)}")
    first_dir = model_dirs[0]
    config, model, preprocessor = load_finetuned(first_dir)
    vocabulary = preprocessor.tokenizer.get_vocabulary()
    weight_lists = [model.get_weights()]
    for member_dir in model_dirs[1:]:
        member_config, member, member_preprocessor = load_finetuned(member_dir)
        check_same_architecture(first_dir, config, vocabulary, member_dir, member_config,
                                 member_preprocessor.tokenizer.get_vocabulary())
        weights = member.get_weights()
        if [w.shape for w in weights] != [w.shape for w in weight_lists[0]]:
            raise DataError(f"{member_dir}: its weights do not have the shapes of {first_dir}'s "
                             "(another encoder size?); a soup averages runs of one architecture")
        weight_lists.append(weights)
        del member
    model.set_weights([np.mean(values, axis=0) for values in zip(*weight_lists)])
    return config, model, preprocessor


def check_same_architecture(first_dir, config, vocabulary, member_dir, member_config, member_vocabulary):
    """Raises ConfigError naming `member_dir` if its run cannot be averaged with `first_dir`'s."""
    # What the weights mean; training-only fields (losses, dropout, steps, seeds) may differ.
    for section, first, other in (("tasks", config.tasks, member_config.tasks),
                                  ("heads.pair_encoder", config.heads.pair_encoder, member_config.heads.pair_encoder),
                                  ("heads.pooling", config.heads.pooling, member_config.heads.pooling),
                                  ("data.max_sequence_length", config.data.max_sequence_length,
                                   member_config.data.max_sequence_length)):
        if first != other:
            raise ConfigError(f"{member_dir}: {section} differs from {first_dir}'s ({other} against "
                             f"{first}); a soup averages runs of one architecture")
    if vocabulary != member_vocabulary:
        raise ConfigError(f"{member_dir}: its vocabulary differs from {first_dir}'s; the members of a "
                         "soup must be fine-tuned from one encoder")


def run_soup(model_dirs: list[str], data_dir: str, output_dir: str) -> dict:
    """Averages the members, scores the soup on the first member's dev files, writes the folder."""
    started = time.perf_counter()
    if os.path.abspath(output_dir) in {os.path.abspath(d) for d in model_dirs}:
        raise ConfigError(f"--output_dir {output_dir} is one of the runs averaged; the soup would "
                         "overwrite it")
    stage(f"averaging the weights of {len(model_dirs)} runs", started)
    config, model, preprocessor = load_soup(model_dirs)
    stage(f"scoring the soup on the dev sets under {data_dir}", started)
    dev = load_dev_sets(config, model.task_specs, data_dir)
    check_dev_sets(config, model.task_specs, dev, preprocessor, data_dir)
    metrics, predictions = evaluate_all(model, preprocessor, dev)
    keys = headline_keys(model.task_specs.values())
    members = [{"model_dir": d, **_member_metrics(d, keys)} for d in model_dirs]
    for member in members:
        print(f"   member {member['model_dir']}: " + "  ".join(
            f"{k}={member[k]:.3f}" for k in keys if k in member))
    os.makedirs(output_dir, exist_ok=True)
    save_config(config, os.path.join(output_dir, "config.json"))
    write_outputs(model, preprocessor.tokenizer, dev, predictions, dict(metrics, members=members),
                  output_dir, config.train.steps_per_block)
    stage("soup: " + "  ".join(f"{k}={metrics[k]:.3f}" for k in keys) + f" -> {output_dir}", started)
    return metrics


def _member_metrics(model_dir: str, keys) -> dict:
    """The dev figures a member's own run wrote (empty if it wrote none)."""
    path = os.path.join(model_dir, "metrics.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        written = json.load(f)
    return {k: written[k] for k in keys if k in written}
