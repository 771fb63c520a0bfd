"""Task data for multitask fine-tuning: text -> in-graph tokenizer -> packed batches.

Every batch holds one task and has the same structure for all tasks, so tf.data
can interleave them:
    x: task (batch,) int32, the task's id (`kerasbert.tasks.task_id`); token_ids, segment_ids, padding_mask (batch, seq):
       the sentence, or the packed pair `[CLS] a [SEP] b [SEP]` for a cross-encoder;
       token_ids_b, segment_ids_b, padding_mask_b: sentence b for a bi-encoder
       (all padding where unused).
    y: (batch,) float32: class id, or the score of a score task; a tags task's (batch, seq):
       the tag id at each word's first piece, -1 elsewhere; a span task's (batch, 2): the
       answer's first and last piece in the window, (0, 0) ([CLS]) when it is not in it.
       (The kinds' y differ in rank: the interleaved stream's y has an unknown shape, and
       `MultitaskBert.task_loss` gives each kind's its shape back.)

Example:
    >>> pre = TaskPreprocessor(tokenizer, sequence_length=16, pair_encoder="cross")
    >>> sst = task_dataset("sst", [Example("the cat sat", "", 4), Example("the dog ran", "", 0)], pre, 2, True)
    >>> sts = task_dataset("sts", [Example("the cat sat", "a cat sat", 4.5)], pre, 2, True)
    >>> train = interleave_tasks({"sst": sst, "sts": sts}, {"sst": 2, "sts": 1}, "round_robin", 1.0)
    >>> x, y = next(iter(train))
    >>> sorted(x), x["token_ids"].shape  # one task's batch: sst's, first in turn
    (['padding_mask', 'padding_mask_b', 'segment_ids', 'segment_ids_b', 'task', 'token_ids', 'token_ids_b'], TensorShape([2, 5]))
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from kerasbert.data.rows import DataError, file_exists
from kerasbert.data.task_files import Example
from kerasbert.packing import ENCODER_KEYS, pack_segments
from kerasbert.tasks import Task, encoder_of, get_task, task_id
from kerasbert.tokenization import clean_text, special_token_ids


class TaskPreprocessor:
    """Tokenizes and packs raw text inside the graph, with the same ops the export serves
    (`kerasbert.packing.pack_segments`: keras-hub's `MultiSegmentPacker` output, in about
    100 graph nodes instead of 3,900, so each dataset's map function traces quickly).

    Args:
        tokenizer: a keras-hub BertTokenizer.
        sequence_length: packed length.
        pair_encoder: "cross" packs a pair into one sequence; "bi" packs each sentence alone (a
            pair_score task may set its own: its `encoder`).
        trim: cut each packed batch to its longest sequence (the padding beyond it changes
            nothing under the padding mask, and costs most of the compute on short text).
            Off for XLA, which wants one shape.
        tasks: the run's tasks ({name: Task}), which a task's name stands for (else the shipped
            task of that name): a pair_score task's own `encoder` is its declaration's.

    Example:
        >>> preprocessor = TaskPreprocessor(tokenizer, 128, "cross")  # e.g. load_tokenizer(minilm_checkpoint())
        >>> x = preprocessor("sts", tf.constant(["The cat sat."]), tf.constant(["Cats sat."]))
        >>> x["token_ids"]  # the packed pair [CLS] a [SEP] b [SEP], trimmed to its length
        <tf.Tensor: shape=(1, 11), dtype=int32, numpy=array([[ 2,  5,  6,  8, 14,  3,  6, 13,  8, 14,  3]], dtype=int32)>
    """

    def __init__(self, tokenizer, sequence_length: int, pair_encoder: str = "cross", trim: bool = True,
                 tasks: dict | None = None):
        self.tokenizer = tokenizer
        # Traced once and called from every dataset's map function and the export's graph:
        # each trace of the tokenizer's ragged ops takes about a second. Text cleaned as BERT's is.
        self.tokenize = tf.function(lambda text: tokenizer(clean_text(text)),
                                    input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        self.sequence_length = sequence_length
        self.pair_encoder = pair_encoder
        self.tasks = dict(tasks or {})
        self.trim = trim
        self.ids = special_token_ids(tokenizer)
        self._graphs = {}

    def graph_of(self, task: Task):
        """The family graph of a tags or span task (`TaggingGraph`, `SpanGraph`): its words or
        windows, tokenized with offsets, for its training features, its scoring and its export
        alike. One per task, built once."""
        if task.name not in self._graphs:
            self._graphs[task.name] = task.family.graph(task, self.tokenizer.get_vocabulary(),
                                                        task.family.sequence_length(task, self.sequence_length))
        return self._graphs[task.name]

    def pack(self, *texts: tf.Tensor) -> dict[str, tf.Tensor]:
        """One or two batches of strings -> token_ids, segment_ids, padding_mask (int32)."""
        return self.pack_tokens(*(self.tokenize(t) for t in texts))

    def pack_tokens(self, *segments: tf.RaggedTensor) -> dict[str, tf.Tensor]:
        """`pack` for text the tokenizer has already split into (ragged) token ids."""
        packed = pack_segments(list(segments), self.sequence_length, self.ids)  # trimmed to the longest row
        if self.trim:
            return packed
        padding = [[0, 0], [0, self.sequence_length - tf.shape(packed["token_ids"])[1]]]
        return {key: tf.ensure_shape(tf.pad(value, padding, constant_values=self.ids["pad"] if key == "token_ids" else 0),
                                     [None, self.sequence_length]) for key, value in packed.items()}

    def encoder_of(self, task: "str | Task") -> str:
        """"cross" or "bi" for a pair task, "" for a one-text task."""
        return encoder_of(self.task_of(task), self.pair_encoder)

    def task_of(self, task: "str | Task") -> Task:
        """`task`, or the run's (else the shipped) task of that name."""
        return task if isinstance(task, Task) else self.tasks.get(task) or get_task(task)

    def __call__(self, task: "str | Task", text_a: tf.Tensor, text_b: tf.Tensor) -> dict[str, tf.Tensor]:
        task = self.task_of(task)
        encoder = self.encoder_of(task)
        if encoder == "cross":
            x, second = self.pack(text_a, text_b), None
        elif encoder == "bi":
            x, second = self.pack(text_a), self.pack(text_b)
        else:
            x, second = self.pack(text_a), None
        if second is None:
            second = {k: tf.zeros_like(v) for k, v in x.items()}
        x.update({f"{k}_b": v for k, v in second.items()})
        x["task"] = tf.fill([tf.shape(text_a)[0]], task_id(task.name))
        return x


def resolve_path(data_dir: str, path: str) -> str:
    """A task file's path: absolute or remote as it is; relative, in the working folder if it
    is there, else under `data_dir`. DataError naming both places if it is in neither.

    >>> resolve_path("../shared/data", "cs224n/sst-dev.tsv")
    '../shared/data/cs224n/sst-dev.tsv'
    """
    if os.path.isabs(path) or "://" in path or file_exists(path):
        return path
    under_data = os.path.join(data_dir, path)
    if not file_exists(under_data):
        raise DataError(f"{path}: file not found, neither in the working folder ({os.getcwd()}) nor under "
                        f"--data_dir ({data_dir})")
    return under_data


def task_dataset(task: "str | Task", examples: list[Example], preprocessor: TaskPreprocessor, batch_size: int,
                 training: bool, seed: int = 0, group_by_length: int = 0,
                 swap_pairs: bool = False) -> tf.data.Dataset:
    """Batches of one task: shuffled and repeated for training, in file order for eval.

    With `group_by_length=k` (training only), each run of k batches' worth of shuffled
    examples is sorted by text length, cut into batches, and those k batches are shuffled
    again: a batch then holds texts of similar length, so a trimmed batch carries little
    padding. The examples seen, and how often, do not change.

    With `swap_pairs` (training only, pair tasks), each drawn pair is (b, a) with
    probability 1/2, seeded.

    Example:
        >>> examples = [Example("the cat sat", "", 4), Example("the dog ran fast", "", 1)]
        >>> dev = task_dataset("sst", examples, preprocessor, batch_size=2, training=False)
        >>> x, y = next(iter(dev))
        >>> x["token_ids"].shape, y.numpy()  # trimmed to the longest row; the class ids
        (TensorShape([2, 6]), array([4., 1.], dtype=float32))
        >>> train = task_dataset("sst", examples, preprocessor, batch_size=2, training=True)  # for model.fit
    """
    task = get_task(task)
    return task.family.dataset(task, examples, preprocessor, batch_size, training, seed, group_by_length, swap_pairs)


def text_dataset(task: Task, examples: list[Example], preprocessor: TaskPreprocessor, batch_size: int,
                 training: bool, seed: int = 0, group_by_length: int = 0,
                 swap_pairs: bool = False) -> tf.data.Dataset:
    """`task_dataset` of a task read from column files: its texts packed by the preprocessor."""
    data = tf.data.Dataset.from_tensor_slices((
        [e.text_a for e in examples], [e.text_b for e in examples],
        np.array([e.label for e in examples], np.float32)))
    if training:
        data = data.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True).repeat()
    if training and swap_pairs and preprocessor.encoder_of(task):  # a pair task
        coins = tf.data.Dataset.random(seed=seed).map(lambda r: r % 2 == 1)
        data = tf.data.Dataset.zip(data, coins).map(_swap_if)
    if training and group_by_length > 1:
        data = grouped_by_length(data, batch_size, group_by_length, seed, _sort_by_length)
    else:
        data = data.batch(batch_size, drop_remainder=training)
    return data.map(lambda a, b, y: (preprocessor(task, a, b), y), num_parallel_calls=tf.data.AUTOTUNE)


def family_dataset(task: Task, examples: list, preprocessor: TaskPreprocessor, batch_size: int, training: bool,
                   seed: int = 0, group_by_length: int = 0) -> tf.data.Dataset:
    """Batches of a tags task's Sentences or a span task's QaExamples (every window of each
    question), their features made once by the task's family graph (`TaskPreprocessor.graph_of`),
    in the batch structure of the other tasks; each batch trimmed to its longest row unless the
    preprocessor keeps one shape (XLA). `group_by_length` as `task_dataset`'s, by packed length.

    Example:
        >>> from kerasbert.families.tagging.conll import read_conll
        >>> sentences = read_conll(conll_file).sentences
        >>> dev = family_dataset(model.task_specs["ner"], sentences, preprocessor, batch_size=2, training=False)
        >>> x, y = next(iter(dev))
        >>> x["token_ids"].shape, y.numpy().tolist()  # the tag ids at each word's first piece, -1 elsewhere
        (TensorShape([2, 8]), [[-1.0, 0.0, 1.0, 0.0, -1.0, -1.0, -1.0, -1.0], [-1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 3.0, -1.0]])
    """
    features, labels = task.family.features(task, preprocessor.graph_of(task), examples, training)
    data = tf.data.Dataset.from_tensor_slices(({key: getattr(features, key) for key in ENCODER_KEYS},
                                               labels.astype(np.float32)))
    if training:
        data = data.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True).repeat()
    if training and group_by_length > 1:
        data = grouped_by_length(data, batch_size, group_by_length, seed, _sort_by_packed_length)
    else:
        data = data.batch(batch_size, drop_remainder=training)
    identity, per_token = task_id(task.name), task.family.per_token_labels

    def complete(x, y):
        if preprocessor.trim:  # to the longest row (a span task's y is one start and end per row)
            width = tf.reduce_max(tf.reduce_sum(x["padding_mask"], axis=1))
            x = {key: value[:, :width] for key, value in x.items()}
            y = y[:, :width] if per_token else y
        x.update({f"{key}_b": tf.zeros_like(x[key]) for key in ENCODER_KEYS})
        x["task"] = tf.fill([tf.shape(y)[0]], identity)
        return x, y

    return data.map(complete, num_parallel_calls=tf.data.AUTOTUNE)


def grouped_by_length(data: tf.data.Dataset, batch_size: int, group: int, seed: int, sort) -> tf.data.Dataset:
    """Batches of `batch_size` from a stream of examples: each run of `group` batches' worth is
    sorted (`sort` maps such a run to itself in length order), cut into batches, and those
    batches shuffled."""
    return (data.batch(batch_size * group).map(sort).unbatch()
            .batch(batch_size, drop_remainder=True).shuffle(group, seed=seed))


def _swap_if(pair, swap):
    text_a, text_b, label = pair
    return tf.where(swap, text_b, text_a), tf.where(swap, text_a, text_b), label


def _sort_by_length(text_a, text_b, labels):
    order = tf.argsort(tf.strings.length(text_a) + tf.strings.length(text_b), stable=True)
    return tf.gather(text_a, order), tf.gather(text_b, order), tf.gather(labels, order)


def _sort_by_packed_length(x, y):
    order = tf.argsort(tf.reduce_sum(x["padding_mask"], axis=1), stable=True)
    return {key: tf.gather(value, order) for key, value in x.items()}, tf.gather(y, order)


def task_weights(sizes: dict[str, int], sampling: str, temperature: float,
                 shares: dict[str, float] | None = None) -> dict[str, float]:
    """Probability of drawing each task's batch: n_t ** (1/T), normalised.

    proportional is T = 1; round_robin gives equal shares (drawn in strict rotation);
    shares takes the given `shares` ({task: share}), normalised, whatever the sizes.

    >>> task_weights({"sst": 100, "para": 300}, "shares", 1.0, {"sst": 3, "para": 1})
    {'sst': 0.75, 'para': 0.25}
    """
    if sampling == "shares":
        total = sum(shares[task] for task in sizes)
        return {task: shares[task] / total for task in sizes}
    power = {"proportional": 1.0, "temperature": 1.0 / temperature, "round_robin": 0.0}[sampling]
    raw = {task: n**power for task, n in sizes.items()}
    total = sum(raw.values())
    return {task: value / total for task, value in raw.items()}


def interleave_tasks(datasets: dict[str, tf.data.Dataset], sizes: dict[str, int], sampling: str,
               temperature: float, seed: int = 0, shares: dict[str, float] | None = None) -> tf.data.Dataset:
    """One stream of single-task batches from the per-task (infinite) streams, drawn as
    `sampling` says (see `task_weights`).

    Example:
        >>> sst_train = task_dataset("sst", [Example("the cat sat", "", 4)], preprocessor, 1, training=True)
        >>> sts_train = task_dataset("sts", [Example("the cat sat", "a cat sat", 4.5)], preprocessor, 1, training=True)
        >>> batches = interleave_tasks({"sst": sst_train, "sts": sts_train}, {"sst": 8544, "sts": 6040},
        ...                            "temperature", temperature=2.0)
        >>> names = {task_id(name): name for name in ("sst", "sts")}
        >>> [names[int(x["task"][0])] for x, y in batches.take(8)]
        ['sts', 'sts', 'sst', 'sst', 'sts', 'sts', 'sts', 'sts']
    """
    tasks = list(datasets)
    if sampling == "round_robin":
        choice = tf.data.Dataset.range(len(tasks)).repeat()
        return tf.data.Dataset.choose_from_datasets([datasets[t] for t in tasks], choice)
    weights = task_weights(sizes, sampling, temperature, shares)
    return tf.data.Dataset.sample_from_datasets([datasets[t] for t in tasks],
                                                [weights[t] for t in tasks], seed=seed)
