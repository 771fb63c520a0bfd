"""Batch inference results as JSON lines or tf.Examples, and the shard names of both.

One JSON line per scored row:
    {"id": "<file>:<line>", "inputs": {"text": "..."}, "outputs": {"embedding": [...]}}
or, with `--output_format tfrecord`, one tf.Example with a bytes feature `id`, a bytes
feature per input and a feature per output (floats as float_list, integers as int64_list,
strings as bytes_list; arrays flattened). Refused rows go to `<prefix>.dead-letter.jsonl`
as `{"id": ..., "reason": ...}`; the counts to `<prefix>.counts.json`.

Example:
    >>> json_line("q.txt:1", {"text": "hi"}, {"label": np.int64(3)})
    '{"id": "q.txt:1", "inputs": {"text": "hi"}, "outputs": {"label": 3}}'
"""

from __future__ import annotations

import json
import re

import numpy as np

from kerasbert.errors import ConfigError, DataError

SUFFIXES = {"jsonl": ".jsonl", "tfrecord": ".tfrecord"}
GLOB_CHARACTERS = "*?["


def check_prefix(prefix: str) -> None:
    """An output prefix names files; it is never a glob (with --overwrite, `dir/*` would
    name every run's results)."""
    glob_characters = sorted({c for c in prefix if c in GLOB_CHARACTERS})
    if glob_characters:
        raise ConfigError(f"--output is a prefix, not a glob: it may not hold {' '.join(glob_characters)}. "
                         f"Received: {prefix!r}")


def is_own_output(prefix: str, path: str) -> bool:
    """True for what a run with `prefix` writes, and nothing else: its shards
    (`PREFIX-00000-of-00002.jsonl` or `.tfrecord`), `PREFIX.counts.json`,
    `PREFIX.dead-letter.jsonl`, and Beam's temp folders for them
    (`DIR/beam-temp-BASE-<uuid>`, `DIR/beam-temp-BASE.dead-letter.jsonl-<uuid>`).

    >>> is_own_output("out/embed", "out/embed-00000-of-00001.jsonl")
    True
    >>> is_own_output("out/embed", "out/embed-2-00000-of-00001.jsonl")  # the run `out/embed-2`'s
    False
    """
    directory, _, base = prefix.rpartition("/")
    suffixes = "|".join(re.escape(suffix) for suffix in SUFFIXES.values())
    own = [re.escape(prefix) + rf"-\d{{5,}}-of-\d{{5,}}(?:{suffixes})", re.escape(counts_path(prefix)),
           re.escape(dead_letter_path(prefix)),
           re.escape(f"{directory}/" if directory else "") + rf"beam-temp-{re.escape(base)}"
           rf"(?:{re.escape('.dead-letter.jsonl')})?-[0-9a-f]{{32}}"]
    return any(re.fullmatch(pattern, path.rstrip("/")) for pattern in own)


def results_pattern(prefix: str, output_format: str = "jsonl") -> str:
    """The glob of the result shards Beam writes under `prefix` (`PREFIX-00000-of-00002.jsonl`);
    it may match another run's too (`PREFIX-2-...`): `is_own_output` tells them apart."""
    return f"{prefix}-[0-9]*-of-[0-9]*{SUFFIXES[output_format]}"


def dead_letter_path(prefix: str) -> str:
    return f"{prefix}.dead-letter.jsonl"


def counts_path(prefix: str) -> str:
    return f"{prefix}.counts.json"


def _plain(value):
    """An output value as JSON: bytes as text, NumPy numbers and arrays as Python's."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.dtype == object else value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def json_line(row_id: str, inputs: dict, outputs: dict) -> str:
    return json.dumps({"id": row_id, "inputs": inputs, "outputs": {name: _plain(value) for name, value
                                                                     in sorted(outputs.items())}},
                      ensure_ascii=False, allow_nan=False)


def tf_example(row_id: str, inputs: dict, outputs: dict) -> bytes:
    import tensorflow as tf

    def feature(value) -> tf.train.Feature:
        array = np.asarray(value).reshape(-1)
        if array.dtype == object or np.issubdtype(array.dtype, np.str_) or np.issubdtype(array.dtype, np.bytes_):
            values = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.tolist()]
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.bool_):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=array.astype(np.int64)))
        return tf.train.Feature(float_list=tf.train.FloatList(value=array.astype(np.float32)))

    features = {"id": feature([row_id]), **{name: feature([text]) for name, text in inputs.items()},
                **{name: feature(value) for name, value in outputs.items()}}
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def read_results(prefix: str, output_name: str, output_format: str = "jsonl"):
    """(ids, texts, vectors) of the rows batch_predict wrote under `prefix`: each row's id,
    its first input's text and its output `output_name` as a float32 row, in shard order."""
    import glob

    paths = sorted(path for path in glob.glob(results_pattern(prefix, output_format)) if is_own_output(prefix, path))
    if not paths:
        raise FileNotFoundError(f"no results of pipelines.batch_predict under {prefix} "
                                f"(expected {results_pattern(prefix, output_format)})")
    ids, texts, vectors = [], [], []
    for path in paths:
        for row_id, text, vector in (_jsonl_rows if output_format == "jsonl" else _tfrecord_rows)(path, output_name):
            ids.append(row_id)
            texts.append(text)
            vectors.append(vector)
    return ids, texts, np.asarray(vectors, np.float32)


def _jsonl_rows(path, output_name):
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            row = json.loads(line)
            if output_name not in row["outputs"]:
                raise DataError(f"{path}:{number}: no output {output_name!r}; it has {sorted(row['outputs'])}")
            yield row["id"], next(iter(row["inputs"].values())), row["outputs"][output_name]


def _tfrecord_rows(path, output_name):
    import tensorflow as tf

    for number, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator(), start=1):
        example = tf.train.Example.FromString(record)
        features = example.features.feature
        if output_name not in features:
            raise DataError(f"{path}:{number}: no output {output_name!r}; it has {sorted(features)}")
        text_name = "text" if "text" in features else "text_a"
        yield (features["id"].bytes_list.value[0].decode(), features[text_name].bytes_list.value[0].decode(),
               list(features[output_name].float_list.value))
