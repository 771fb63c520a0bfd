"""RunInference's model handler for a signature of an exported SavedModel.

Beam's own `tensorflow_inference.TFModelHandlerTensor` loads models with
`tf.keras.models.load_model`, which under Keras 3 reads only `.keras` files (a SavedModel
folder is refused), and calls the model rather than one of its named signatures; so this
subclass of `ModelHandler` loads the folder with `tf.saved_model.load` and calls the
signature with a batch of strings per input. RunInference loads it once per worker process
and shares it between that process's threads.

Example:
    >>> handler = KeyedModelHandler(SavedModelSignatureHandler("saved_models/kerasbert/3", "embed"))
    >>> rows | RunInference(handler)  # (id, {"text": ...}) -> (id, PredictionResult)
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
        import tensorflow as tf

        feed = {name: tf.constant([row[name] for row in batch], tf.string) for name in self.input_names}
        outputs = {name: value.numpy() for name, value in model(**feed).items()}
        for index, row in enumerate(batch):
            yield PredictionResult(row, {name: value[index] for name, value in outputs.items()})

    def get_num_bytes(self, batch: Sequence[dict]) -> int:
        return sum(len(value.encode("utf-8")) for row in batch for value in row.values())

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def __repr__(self):
        return f"SavedModelSignatureHandler({os.path.basename(self.model_dir)!r}, {self.signature!r})"


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
