"""RunInference's model handler for a signature of an exported SavedModel.

Beam's own `tensorflow_inference.TFModelHandlerTensor` loads models with
`tf.keras.models.load_model`, which under Keras 3 reads only `.keras` files (a SavedModel
folder is refused), and calls the model rather than one of its named signatures; so this
subclass of `ModelHandler` loads the folder with `tf.saved_model.load` and calls the
signature with a batch of strings per input. RunInference loads it once per worker process
and shares it between that process's threads.

Example:
    >>> import apache_beam as beam
    >>> from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
    >>> handler = KeyedModelHandler(SavedModelSignatureHandler(export_dir, "embed"))  # e.g. saved_models/kerasbert/3
    >>> with beam.Pipeline() as pipeline:  # (id, {"text": ...}) -> (id, PredictionResult)
    ...     _ = (pipeline | beam.Create([("row-1", {"text": "the cat sat"})]) | RunInference(handler)
    ...          | beam.MapTuple(lambda key, result: print(key, sorted(result.inference))))
    row-1 ['embedding']
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from kerasbert.batch.signatures import string_inputs

NAMESPACE = "kerasbert_batch_predict"  # Beam metrics of the job: its own counts and RunInference's


class SavedModelSignatureHandler(ModelHandler[dict, PredictionResult, Any]):
    """Batches of `{input name: text}` through `signature` of the SavedModel at `model_dir`;
    each result's `inference` is `{output name: array of that row}`. `threads`: TensorFlow's
    threads per worker process (None: one per core), for workers that share one machine."""

    def __init__(self, model_dir: str, signature: str, min_batch_size: int = 1, max_batch_size: int = 64,
                 threads: int | None = None):
        super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size)
        self.model_dir, self.signature, self.threads = model_dir, signature, threads
        self.input_names = string_inputs(model_dir, signature)  # checked here, before any worker starts

    def load_model(self):
        from kerasbert.cpu_kernels import prefer_onednn

        prefer_onednn()  # quietly, once per worker process
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  the ops of the tokenizer inside the graph

        set_tensorflow_threads(self.threads)
        return tf.saved_model.load(self.model_dir).signatures[self.signature]

    def run_inference(self, batch: Sequence[dict], model, inference_args=None) -> Iterable[PredictionResult]:
        """Each row's outputs, cut to its own counts (`row_outputs`). A batch the model
        refuses (one context too long for the `answer` signature fails its whole call) is
        scored again row by row: a row the model refuses alone gets a `ModelRefusal`."""
        import tensorflow as tf

        def call(rows):
            feed = {name: tf.constant([row[name] for row in rows], tf.string) for name in self.input_names}
            return {name: value.numpy() for name, value in model(**feed).items()}

        try:
            outputs = call(batch)
        except tf.errors.InvalidArgumentError as error:
            if len(batch) == 1:
                yield PredictionResult(batch[0], ModelRefusal(op_message(error.message)))
            else:
                for row in batch:
                    yield from self.run_inference([row], model)
            return
        for index, row in enumerate(batch):
            yield PredictionResult(row, row_outputs({name: value[index] for name, value in outputs.items()}))

    def get_num_bytes(self, batch: Sequence[dict]) -> int:
        return sum(len(value.encode("utf-8")) for row in batch for value in row.values())

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def __repr__(self):
        return f"SavedModelSignatureHandler({os.path.basename(self.model_dir)!r}, {self.signature!r})"


class ModelRefusal(str):
    """The model's own reason for refusing a row (`op_message` of its InvalidArgumentError)."""


def op_message(message: str) -> str:
    """The failing op's own line of a TensorFlow error message: the one before its
    `[[{{node ...}}]]` line (serving/status.py reads errors alike; serving is a layer of its own).

    >>> op_message("Graph execution error:\\n\\nassertion failed: [empty question]\\n\\t [[{{node Assert}}]]")
    'assertion failed: [empty question]'
    """
    lines = [line for line in message.splitlines() if line.strip()]
    return next((before for before, line in zip(lines, lines[1:]) if line.lstrip().startswith("[[")),
                lines[0] if lines else "")


# Outputs padded to the batch's largest count, and the output holding each row's count
# (the `entities` signature): a row's result is cut to its own, whatever its batch.
PADDED = {"num_entities": ("entity_text", "entity_type", "entity_start", "entity_end", "entity_score"),
          "num_words": ("word", "word_tag", "word_start", "word_end")}


def row_outputs(outputs: dict) -> dict:
    """One row's outputs without the padding of its batch.

    >>> row_outputs({"entity_text": [b"Paris", b""], "num_entities": 1})["entity_text"]
    [b'Paris']
    """
    cut = dict(outputs)
    for count, names in PADDED.items():
        if count in outputs:
            for name in names:
                if name in outputs:
                    cut[name] = outputs[name][:int(outputs[count])]
    return cut


def set_tensorflow_threads(threads: int | None) -> None:
    """TensorFlow's thread pools of this worker process, sized once: by whichever of its
    steps uses TensorFlow first (reading TFRecords, or loading the model)."""
    if not threads:
        return
    from kerasbert.cpu_kernels import prefer_onednn

    prefer_onednn()
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # TensorFlow runs already in this process: its pools are set
        pass
