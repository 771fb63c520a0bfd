"""Run configuration: plain frozen dataclasses, loaded from JSON, overridden by `--set`.

A config flows one way: JSON file in `pipelines/configs/` -> `--set key=value`
overrides -> validated once in `__post_init__` -> saved next to every
checkpoint and export. Layers never see these objects; builders unpack them.

Example:
    >>> config = load_config(PretrainConfig, "pipelines/configs/pretrain_tiny.json",
    ...                      overrides=["train.learning_rate=1e-3", "model.preset=mini"])
    >>> config.model.hidden_dim
    256
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from typing import Any

from kerasbert.errors import ConfigError
from kerasbert.tasks import BUILTIN_TASKS, DEFAULT_TASKS, HEADS_BEFORE, Task, declare_tasks, upgrade_heads

# Size presets: (num_layers, hidden_dim, num_heads). intermediate_dim is 4x hidden.
MODEL_PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
}


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Encoder size. `preset` fills the sizes; explicit sizes win over the preset.

    Example:
        >>> ModelConfig(preset="mini", max_sequence_length=64).intermediate_dim
        1024
    """

    preset: str = "tiny"  # one of MODEL_PRESETS, or "custom"
    num_layers: int = 0  # 0 = take from preset
    hidden_dim: int = 0
    num_heads: int = 0
    intermediate_dim: int = 0
    max_sequence_length: int = 128  # length of packed inputs (and position table)
    dropout: float = 0.1
    # "random": keras-hub's truncated normal (BERT). "sinusoidal": the Transformer's
    # sin/cos table, scaled to the token embeddings' size; still trained.
    position_init: str = "random"

    def __post_init__(self):
        _check(
            self.preset in MODEL_PRESETS or self.preset == "custom",
            f"model.preset must be one of {sorted(MODEL_PRESETS)} or 'custom'. "
            f"Received: model.preset={self.preset!r}",
        )
        layers, hidden, heads = MODEL_PRESETS.get(self.preset, (0, 0, 0))
        # Frozen dataclass: fill derived sizes through object.__setattr__ once.
        for name, value in (
            ("num_layers", self.num_layers or layers),
            ("hidden_dim", self.hidden_dim or hidden),
            ("num_heads", self.num_heads or heads),
        ):
            object.__setattr__(self, name, value)
        object.__setattr__(
            self, "intermediate_dim", self.intermediate_dim or 4 * self.hidden_dim
        )
        _check(self.num_layers > 0, f"model.num_layers must be > 0. Received: {self.num_layers}")
        _check(self.hidden_dim > 0, f"model.hidden_dim must be > 0. Received: {self.hidden_dim}")
        _check(
            self.num_heads > 0 and self.hidden_dim % self.num_heads == 0,
            "model.hidden_dim must be a multiple of model.num_heads. "
            f"Received: hidden_dim={self.hidden_dim}, num_heads={self.num_heads}",
        )
        _check(
            8 <= self.max_sequence_length <= 512,
            f"model.max_sequence_length must be in [8, 512]. Received: {self.max_sequence_length}",
        )
        _check(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1). Received: {self.dropout}")
        _check(self.position_init in ("random", "sinusoidal"),
               f"model.position_init must be 'random' or 'sinusoidal'. Received: {self.position_init!r}")


@dataclasses.dataclass(frozen=True)
class PretrainDataConfig:
    """Which text to pretrain on and how examples are built and masked from it.

    Example:
        >>> PretrainDataConfig(sources=("my_corpus.txt",), masking="whole_word", nsp=False).sources
        ('my_corpus.txt',)
    """

    # Corpora by name (see kerasbert.data.corpus.CORPORA): wikitext, imdb, sst, sts, quora.
    sources: tuple[str, ...] = ("wikitext", "imdb")
    heldout_source: str = "wikitext_test"  # documents never trained on, for metrics.json
    heldout_examples: int = 512  # cap on held-out examples scored
    vocab_file: str = ""  # "" = vocabulary of --init_checkpoint, else trained by pipelines.vocab
    vocab_size: int = 8000  # used only when a vocabulary is trained
    nsp: bool = True  # next-sentence prediction head and 50/50 pairs
    nsp_loss_weight: float = 1.0  # training loss = mlm + nsp_loss_weight * nsp
    short_seq_prob: float = 0.1  # as google-research/bert: some shorter pairs
    dupe_factor: int = 1  # passes over the corpus with different pairings
    masking: str = "token"  # token | whole_word | span
    mask_selection_rate: float = 0.15
    # Held-out examples are always masked at this rate (BERT's 15%), so held-out MLM accuracy
    # compares across runs that train at other rates.
    heldout_mask_selection_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    mask_selection_length: int = 20  # max predictions per sequence
    span_geometric_p: float = 0.2  # SpanBERT span lengths ~ Geometric(p), clipped
    span_max_length: int = 10
    tfrecord_dir: str = ""  # read pre-made shards (pipelines.make_pretraining_data) instead
    # Start a fresh MLM head's output bias at the log unigram frequencies of the training
    # tokens: the loss starts at the unigram level instead of climbing to it for hundreds of steps.
    mlm_bias_prior: bool = False

    def __post_init__(self):
        object.__setattr__(self, "sources", tuple(self.sources))
        _check(len(self.sources) > 0, "data.sources must name at least one corpus.")
        _check(
            self.masking in ("token", "whole_word", "span"),
            f"data.masking must be token, whole_word or span. Received: {self.masking!r}",
        )
        _check(
            0.0 < self.mask_selection_rate < 1.0,
            f"data.mask_selection_rate must be in (0, 1). Received: {self.mask_selection_rate}",
        )
        _check(
            0.0 < self.heldout_mask_selection_rate < 1.0,
            "data.heldout_mask_selection_rate must be in (0, 1). Received: "
            f"{self.heldout_mask_selection_rate}",
        )
        _check(
            self.mask_token_rate >= 0
            and self.random_token_rate >= 0
            and self.mask_token_rate + self.random_token_rate <= 1.0,
            "data.mask_token_rate + data.random_token_rate must be <= 1. Received: "
            f"{self.mask_token_rate} + {self.random_token_rate}",
        )
        _check(self.mask_selection_length > 0, "data.mask_selection_length must be > 0.")
        _check(0.0 < self.span_geometric_p <= 1.0, "data.span_geometric_p must be in (0, 1].")
        _check(self.dupe_factor >= 1, "data.dupe_factor must be >= 1.")
        _check(self.nsp_loss_weight >= 0, "data.nsp_loss_weight must be >= 0.")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and run length, in steps (a block is one Keras epoch and one backup).

    Example:
        >>> TrainConfig(total_steps=600, steps_per_block=100).num_blocks
        6
        >>> TrainConfig(total_steps=20, steps_per_block=100).steps_per_block
        20
    """

    batch_size: int = 32  # global batch, split across replicas
    total_steps: int = 200
    # One Keras "epoch": the backup and logging interval. Larger than total_steps (a shorter
    # run asked for with total_steps alone), it is taken as total_steps: one block.
    steps_per_block: int = 50
    learning_rate: float = 1e-3
    schedule: str = "linear"  # linear (warmup then linear decay) | exponential
    warmup_fraction: float = 0.1
    exponential_gamma: float = 0.9  # lr = lr0 * gamma ** (step / steps_per_block)
    weight_decay: float = 0.01
    clipnorm: float = 1.0  # 0: no clipping
    # What clipnorm bounds: "each" weight's gradient alone (keras' clipnorm), or the "global"
    # norm of all gradients together (keras' global_clipnorm; BERT's and PyTorch's recipes).
    clip_scope: str = "each"
    # > 0: keep an exponential moving average of the weights (keras' use_ema), evaluate and
    # keep that average. 0.99 averages over about the last 100 steps.
    ema_momentum: float = 0.0
    # > 0: first train only the fresh heads (MLM/NSP, or the task heads), encoder frozen, for
    # this many steps at a constant head_warmup_learning_rate; then the whole model as usual.
    head_warmup_steps: int = 0
    head_warmup_learning_rate: float = 1e-3
    mixed_precision: bool = False
    jit_compile: bool = False  # XLA
    # A step whose loss is NaN or infinite stops the run (an error naming the step); true:
    # such a step leaves the weights as they were and is counted in metrics.json instead.
    skip_nonfinite_batches: bool = False
    seed: int = 1234
    shuffle_buffer: int = 10000

    def __post_init__(self):
        _check(self.batch_size > 0, f"train.batch_size must be > 0. Received: {self.batch_size}")
        _check(self.total_steps > 0, f"train.total_steps must be > 0. Received: {self.total_steps}")
        _check(self.steps_per_block > 0, "train.steps_per_block must be > 0.")
        object.__setattr__(self, "steps_per_block", min(self.steps_per_block, self.total_steps))
        _check(
            self.total_steps % self.steps_per_block == 0,
            "train.total_steps must be a multiple of train.steps_per_block. Received: "
            f"total_steps={self.total_steps}, steps_per_block={self.steps_per_block}",
        )
        _check(self.learning_rate > 0, "train.learning_rate must be > 0.")
        _check(
            self.schedule in ("linear", "exponential"),
            f"train.schedule must be linear or exponential. Received: {self.schedule!r}",
        )
        _check(0.0 <= self.warmup_fraction < 1.0, "train.warmup_fraction must be in [0, 1).")
        _check(self.clipnorm >= 0, f"train.clipnorm must be >= 0 (0 = no clipping). Received: {self.clipnorm}")
        _check(self.clip_scope in ("each", "global"),
               f"train.clip_scope must be each or global. Received: {self.clip_scope!r}")
        _check(0.0 <= self.ema_momentum < 1.0,
               f"train.ema_momentum must be in [0, 1) (0 = off). Received: {self.ema_momentum}")
        _check(self.head_warmup_steps >= 0,
               f"train.head_warmup_steps must be >= 0. Received: {self.head_warmup_steps}")
        _check(not (self.skip_nonfinite_batches and self.ema_momentum > 0),
               "train.skip_nonfinite_batches does not combine with train.ema_momentum > 0 (keras' "
               "moving average lives on the optimizer that skipping wraps).")
        _check(self.head_warmup_learning_rate > 0,
               f"train.head_warmup_learning_rate must be > 0. Received: {self.head_warmup_learning_rate}")

    @property
    def num_blocks(self) -> int:
        return self.total_steps // self.steps_per_block


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Everything one pretraining run needs, saved as `config.json` in its output.

    Example:
        >>> config = PretrainConfig(model=ModelConfig(preset="mini"), train=TrainConfig(total_steps=400))
        >>> config.model.num_layers, config.train.num_blocks  # run_pretraining(config, data_dir, "runs/mini")
        (4, 8)
    """

    model: ModelConfig = ModelConfig()
    data: PretrainDataConfig = PretrainDataConfig()
    train: TrainConfig = TrainConfig()


# --- Loading, overriding, saving ------------------------------------------------


def from_dict(cls, values: dict[str, Any], where: str = ""):
    """Builds dataclass `cls` from a nested dict, rejecting unknown keys. A section given in
    part keeps the rest of its parent's default (fine-tuning's `train`, not `TrainConfig()`).

    >>> from_dict(TrainConfig, {"total_steps": 100, "steps_per_block": 50}).num_blocks
    2
    >>> from_dict(FinetuneConfig, {"train": {"total_steps": 300}}).train.learning_rate
    5e-05
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = _upgrade_task_keys(cls, values)
    if cls.__name__ == "FinetuneConfig":
        values = _upgrade_heads(values)
    unknown = sorted(set(values) - set(fields))
    _check(not unknown, f"Unknown config key(s) {unknown} in {where or cls.__name__}. "
           f"Known: {sorted(fields)}")
    kwargs = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            _check(isinstance(value, dict), f"{where}{name} must be an object. Received: {value!r}")
            kwargs[name] = from_dict(hint, {**_own_defaults(fields[name].default, hint), **value},
                                     where=f"{where}{name}.")
        else:
            kwargs[name] = value
    return cls(**kwargs)


def _own_defaults(default, cls) -> dict[str, Any]:
    """The fields where a parent's default section (`FinetuneConfig.train`) differs from `cls()`."""
    if not dataclasses.is_dataclass(default):
        return {}
    plain = cls()
    return {f.name: getattr(default, f.name) for f in dataclasses.fields(cls)
            if getattr(default, f.name) != getattr(plain, f.name)}


# Before tasks were declared in kerasbert.tasks, each had its own keys (`sst_train`,
# `sts_share`, ...). Config files and run folders written then still load.
_TASK_KEYS_BEFORE = {
    "FinetuneDataConfig": {f"{task}_{split}": (f"{split}_files", task)
                           for task in DEFAULT_TASKS for split in ("train", "dev")},
    "ScheduleConfig": {**{f"{task}_share": ("shares", task) for task in DEFAULT_TASKS},
                       **{f"{task}_weight": ("loss_weights", task) for task in DEFAULT_TASKS}},
}


def _upgrade_task_keys(cls, values: dict[str, Any]) -> dict[str, Any]:
    renamed = _TASK_KEYS_BEFORE.get(cls.__name__, {})
    if not renamed.keys() & values.keys():
        return values
    values = dict(values)
    for old, (field, task) in renamed.items():
        if old in values:
            values[field] = {**values.get(field, {}), task: values.pop(old)}
    return values


# The settings keys HEADS_BEFORE's became (ScoreSettings, ClassificationSettings).
_HEADS_MOVED = {"sts_encoder": "encoder", "sts_loss": "loss", "para_mnrl_weight": "mnrl_weight", "mnrl_scale": "mnrl_scale"}


def _upgrade_heads(values: dict[str, Any]) -> dict[str, Any]:
    """A fine-tuning config's heads section without the sentence settings it held until issue 86,
    their values moved to the tasks' declarations (`kerasbert.tasks.upgrade_heads`).

    >>> _upgrade_heads({"heads": {"pair_encoder": "bi", "sts_loss": "cosine"}, "tasks": "sts"})["tasks"]["sts"]["loss"]
    'cosine'
    """
    heads = values.get("heads")
    if not isinstance(heads, dict) or not HEADS_BEFORE.keys() & heads.keys():
        return values
    old = {key: heads[key] for key in HEADS_BEFORE if key in heads}
    return {**values, "heads": {key: value for key, value in heads.items() if key not in old},
            "tasks": upgrade_heads(values.get("tasks", DEFAULT_TASKS), old)}


def to_dict(config) -> dict[str, Any]:
    """A config as JSON values; a fine-tuning run's tasks as declared (`Task.to_config`: flat).

    >>> to_dict(FinetuneConfig(tasks="squad"))["tasks"]["squad"]["doc_stride"]
    0
    """
    values = dataclasses.asdict(config)
    if isinstance(config, FinetuneConfig):
        values["tasks"] = {name: task.to_config() for name, task in config.tasks.items()}
    return values


# Fields that map names to values (task names, or a task's declaration keys): an override may
# add a key their defaults do not have, and its value is read as JSON (else as text).
MAPPING_FIELDS = ("tasks", "train_files", "dev_files", "shares", "loss_weights")


def _parse_json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse_value(text: str, current: Any) -> Any:
    """Parses an override string to the type of the field it replaces."""
    if isinstance(current, bool):
        lowered = text.lower()
        _check(lowered in ("true", "false", "1", "0"), f"Expected true/false. Received: {text!r}")
        return lowered in ("true", "1")
    if isinstance(current, int):
        return int(text)
    if isinstance(current, float):
        return float(text)
    if isinstance(current, (tuple, list)):  # a task's labels are a list in its declaration
        return tuple(item for item in text.split(",") if item)
    if isinstance(current, dict):  # a mapping in JSON, or names ("tasks=sst,sts")
        return _parse_json_or_text(text)
    return text


def apply_overrides(values: dict[str, Any], defaults: dict[str, Any], overrides: list[str]) -> dict:
    """Applies `section.key=value` strings to a nested dict of config values."""
    for override in overrides:
        _check("=" in override, f"--set takes key=value. Received: {override!r}")
        key, text = override.split("=", 1)
        path = key.strip().split(".")
        node, default_node, free = values, defaults, False
        for part in path[:-1]:
            if not free:
                sections = sorted(name for name, value in default_node.items() if isinstance(value, dict))
                _check(part in sections, f"Unknown config section {part!r} in --set {override!r}. Sections: {sections}")
                free = part in MAPPING_FIELDS  # below it: names the defaults need not have
            if not isinstance(node.get(part, {}), dict):
                node[part] = declare_names_as_mapping(node[part])
            node = node.setdefault(part, {})
            default_node = default_node.get(part, {}) if isinstance(default_node, dict) else {}
        leaf = path[-1]
        if free and leaf not in default_node:
            node[leaf] = _parse_json_or_text(text)
            continue
        _check(not (path[:-1] == ["heads"] and leaf in HEADS_BEFORE), f"--set {override!r}: heads.{leaf} is a task's "
               f"setting since issue 86: --set tasks.TASK.{_HEADS_MOVED.get(leaf)}=... (TASK: a "
               f"{'pair_binary' if 'mnrl' in leaf else 'pair_score'} task of the run)")
        _check(leaf in default_node, f"Unknown config key {key!r} in --set {override!r}. "
               f"Known: {sorted(default_node)}")
        try:
            node[leaf] = _parse_value(text, default_node[leaf])  # the field's type, not the file's
        except ValueError as error:
            raise ConfigError(f"Bad value in --set {override!r}: {error}") from None
    return values


def declare_names_as_mapping(tasks) -> dict:
    """A list (or comma-separated string) of task names as a mapping of names to empty
    declarations, so an override can set one task's key."""
    names = tasks.split(",") if isinstance(tasks, str) else tasks
    return {name.strip(): {} for name in names if name.strip()}


def _no_duplicate_keys(pairs):
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    _check(not twice, f"key(s) {twice} given twice in one object (two tasks with one name?)")
    return dict(pairs)


def read_json(path: str) -> Any:
    """A JSON file's value; ConfigError naming the file and line, or a key given twice."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}:{error.lineno}: invalid JSON: {error.msg}") from None
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None


def load_config(cls, path: str | None = None, overrides: list[str] | None = None):
    """Loads `cls` from a JSON file (or defaults), applies overrides, validates. A config's
    `"tasks"` may name a JSON file of task declarations, read relative to the config's folder.

    Example:
        >>> config = load_config(FinetuneConfig, "pipelines/configs/finetune_tiny.json",
        ...                      ["train.total_steps=90", "heads.pair_encoder=bi"])
        >>> config.heads.pair_encoder
        'bi'
    """
    values: dict[str, Any] = {}
    if path:
        if not os.path.exists(path):
            raise ConfigError(f"Config file not found: {path}")
        values = read_json(path)
        if isinstance(values.get("tasks"), str) and values["tasks"].endswith(".json"):
            task_file = os.path.join(os.path.dirname(path), values["tasks"])
            values["tasks"] = read_json(task_file)
            _check(isinstance(values["tasks"], dict), f"{task_file}: a task file holds one object, "
                   "task names to declarations")
    values = apply_overrides(values, to_dict(cls()), overrides or [])
    return from_dict(cls, values)


def save_config(config, path: str) -> None:
    """Writes a config as indented JSON, the form `load_config` reads back.

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "config.json")
        >>> save_config(PretrainConfig(), path)
        >>> load_config(PretrainConfig, path) == PretrainConfig()
        True
    """
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_dict(config), f, indent=2)
        f.write("\n")


def _per_task(values: dict, default, tasks: dict, where: str) -> dict:
    """`values` ({task: value}) for the run's `tasks`, completed with `default`. Keys naming
    shipped tasks the run leaves out are dropped (configs name them all); others are errors."""
    unknown = sorted(set(values) - set(tasks) - set(BUILTIN_TASKS))
    _check(not unknown, f"{where} names task(s) {unknown} the run does not declare. Its tasks: {list(tasks)}")
    return {name: values.get(name, default(task) if callable(default) else default) for name, task in tasks.items()}


@dataclasses.dataclass(frozen=True)
class FinetuneDataConfig:
    """How much of the task files to use, and how to pack them. `train_files` and
    `dev_files` map task names to files in place of their declared ones (the run's
    `tasks` then hold them).

    Example:
        >>> FinetuneConfig(data=FinetuneDataConfig(train_files={"sst": "/data/my-sst-train.tsv"})).tasks["sst"].train_file
        '/data/my-sst-train.tsv'
    """

    train_files: dict[str, str] = dataclasses.field(default_factory=dict)
    dev_files: dict[str, str] = dataclasses.field(default_factory=dict)
    max_train_examples: int = 0  # per task; 0 = all
    max_dev_examples: int = 0  # per task; 0 = all
    max_sequence_length: int = 128  # packed pair (cross-encoder) or one sentence
    group_by_length: int = 0  # > 1: sort each run of this many training batches by length (0 = off)
    # Training pairs (para, sts) put b before a half the time: both tasks are symmetric,
    # and a cross-encoder otherwise learns from one order only.
    swap_pairs: bool = False

    def __post_init__(self):
        _check(self.max_train_examples >= 0 and self.max_dev_examples >= 0,
               "data.max_train_examples and data.max_dev_examples must be >= 0")
        _check(8 <= self.max_sequence_length <= 512,
               f"data.max_sequence_length must be in [8, 512]. Received: {self.max_sequence_length}")
        _check(self.group_by_length >= 0, f"data.group_by_length must be >= 0. Received: {self.group_by_length}")


@dataclasses.dataclass(frozen=True)
class HeadsConfig:
    """The task heads on the shared encoder. A task's own head settings are its family's (a
    pair_score task's `encoder` and `loss`, a pair_binary task's `mnrl_weight` and `mnrl_scale`:
    `heads.sts_encoder`, `sts_loss`, `para_mnrl_weight` and `mnrl_scale` until issue 86, which
    a config still sets for its tasks: `kerasbert.tasks.upgrade_heads`).

    Example:
        >>> HeadsConfig(pair_encoder="bi").encoder_of(BUILTIN_TASKS["sts"])
        'bi'
    """

    pair_encoder: str = "cross"  # cross: [CLS] a [SEP] b [SEP]; bi: Sentence-BERT embeddings
    pooling: str = "mean"  # sentence embedding: mean of token states, or the cls pooler
    dropout: float = 0.1

    def __post_init__(self):
        _check(self.pair_encoder in ("cross", "bi"),
               f"heads.pair_encoder must be cross or bi. Received: {self.pair_encoder!r}")
        _check(self.pooling in ("mean", "cls"), f"heads.pooling must be mean or cls. Received: {self.pooling!r}")

    def encoder_of(self, task: Task) -> str:
        """"cross" or "bi" for a pair task ("" for one text): the task's own `encoder` if it
        sets one (a pair_score task), else pair_encoder."""
        from kerasbert.tasks import encoder_of

        return encoder_of(task, self.pair_encoder)


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """How batches of the tasks are interleaved, and how their losses are weighted.
    `shares` and `loss_weights` map task names to values; the run's tasks left out take 1
    (`FinetuneConfig` completes them).

    Example:
        >>> FinetuneConfig(schedule=ScheduleConfig(sampling="shares", shares={"sts": 0})).schedule.shares
        {'sst': 1.0, 'para': 1.0, 'sts': 0}
    """

    sampling: str = "temperature"  # round_robin | proportional | temperature | shares
    temperature: float = 2.0  # task t drawn with probability ~ n_t ** (1 / temperature)
    # sampling=shares: task t drawn with probability share_t / sum of shares (0 = never trained)
    shares: dict[str, float] = dataclasses.field(default_factory=dict)
    loss_weights: dict[str, float] = dataclasses.field(default_factory=dict)
    layerwise_lr_decay: float = 1.0  # < 1: lower layers learn slower (1 = off)
    hold_idle_heads: bool = False  # True: a head keeps its weights on other tasks' batches

    def __post_init__(self):
        _check(self.sampling in ("round_robin", "proportional", "temperature", "shares"),
               "schedule.sampling must be round_robin, proportional, temperature or shares. "
               f"Received: {self.sampling!r}")
        _check(self.temperature > 0, "schedule.temperature must be > 0")
        _check(min(self.shares.values(), default=0) >= 0, f"schedule.shares must be >= 0. Received: {self.shares}")
        _check(self.sampling == "shares" or set(self.shares.values()) <= {1.0},
               f"schedule.shares needs schedule.sampling=shares. Received: {self.shares} with "
               f"sampling={self.sampling!r}")
        _check(0 < self.layerwise_lr_decay <= 1, "schedule.layerwise_lr_decay must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """Everything one multitask fine-tuning run needs; saved as `config.json`.

    Example:
        >>> config = FinetuneConfig(tasks="sts,sst", heads=HeadsConfig(pair_encoder="bi"))
        >>> list(config.tasks), config.tasks["sts"].kind  # run_finetuning(config, data_dir, "runs/bi", checkpoint)
        (['sts', 'sst'], 'pair_score')
    """

    # The run's tasks, a head each: names of shipped tasks, or {name: declaration} (kerasbert.tasks).
    # Held as {name: Task}, in order: the first task's text signature is an export's serving_default.
    tasks: dict[str, Task] = dataclasses.field(default_factory=lambda: declare_tasks(DEFAULT_TASKS))
    data: FinetuneDataConfig = FinetuneDataConfig()
    heads: HeadsConfig = HeadsConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    train: TrainConfig = TrainConfig(batch_size=32, total_steps=600, steps_per_block=100,
                                     learning_rate=5e-5)

    def __post_init__(self):
        tasks = declare_tasks(self.tasks)  # TaskError, a ConfigError, names what is wrong
        data, schedule = self.data, self.schedule
        # The data section's files replace the declared ones; then every file is the task's.
        files = {"train_file": _per_task(data.train_files, lambda task: task.train_file, tasks, "data.train_files"),
                 "dev_file": _per_task(data.dev_files, lambda task: task.dev_file, tasks, "data.dev_files")}
        tasks = {name: dataclasses.replace(task, **{key: files[key][name] for key in files})
                 for name, task in tasks.items()}
        for task in tasks.values():  # a span task's stride, against the length its windows take in this run
            task.family.check_run(task, task.family.sequence_length(task, data.max_sequence_length))
            task.family.check_heads(task, self.heads.pair_encoder)
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "data", dataclasses.replace(data, train_files={}, dev_files={}))
        object.__setattr__(self, "schedule", dataclasses.replace(
            schedule, shares=_per_task(schedule.shares, 1.0, tasks, "schedule.shares"),
            loss_weights=_per_task(schedule.loss_weights, 1.0, tasks, "schedule.loss_weights")))
        _check(sum(self.schedule.shares[task] for task in self.tasks) > 0,
               f"schedule.shares of the run's tasks {self.tasks} must have a positive sum. "
               f"Received: {self.schedule.shares}")
        # The layer-wise decay and the held heads rescale each update after the optimizer has
        # applied it (and updated its average): the average would follow weights the model
        # never had.
        _check(not (self.train.ema_momentum and self.schedule.layerwise_lr_decay < 1.0),
               "train.ema_momentum cannot be combined with schedule.layerwise_lr_decay < 1.")
        _check(not (self.train.ema_momentum and self.schedule.hold_idle_heads),
               "train.ema_momentum cannot be combined with schedule.hold_idle_heads.")
        # The multitask step computes its losses in the heads' dtype; it was never run in
        # half precision, so it says so instead of ignoring the setting.
        _check(not self.train.mixed_precision,
               "train.mixed_precision is for pretraining; multitask fine-tuning runs in float32.")

    @property
    def trained_tasks(self) -> tuple[str, ...]:
        """The tasks whose batches are drawn: `tasks`, less those whose share is 0.

        >>> load_config(FinetuneConfig, None, ["schedule.sampling=shares", "schedule.shares.sts=0"]).trained_tasks
        ('sst', 'para')
        """
        if self.schedule.sampling != "shares":
            return tuple(self.tasks)
        return tuple(task for task in self.tasks if self.schedule.shares[task] > 0)
