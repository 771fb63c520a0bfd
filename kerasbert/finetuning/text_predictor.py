"""A fine-tuned model called on raw strings in Python, as keras-hub's tasks are with their
preprocessor: each task's outputs as the export's text signature of that task gives them.

`TextPredictor` holds a `MultitaskBert` and its `TaskPreprocessor` and runs the same
functions `kerasbert.export` writes into the SavedModel (`serving_functions`: tokenize,
pack, encode, head, class names), so what Python gets is what a server answers.

Example:
    >>> predictor = TextPredictor.from_run(run_dir)  # e.g. runs/finetune
    >>> predictor.predict("sst", ["the cat sat", "the dog ran"])["class_name"]  # a tiny random model's
    array([b'...', b'...'], dtype=object)
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from kerasbert.errors import ConfigError
from kerasbert.export import serving_functions
from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.finetuning.load import load_finetuned
from kerasbert.quantize import serving_precision


class TextPredictor:
    """`model` (a `MultitaskBert`) and `preprocessor` (its `TaskPreprocessor`) on lists of
    strings: `predict(task, text)` for a one-text task, `predict(task, text_a, text_b)` for a
    pair task, `predict("embed", text)` for sentence embeddings. A task is named by its name
    (`sst`) or its signature's (`sentiment`); the result is that signature's outputs as
    NumPy arrays (`class_name` as bytes, as TensorFlow gives strings).

    Example (a tiny random model; a fine-tuned one comes from `TextPredictor.from_run`):
        >>> from kerasbert import MultitaskBert, build_encoder, make_tokenizer
        >>> tokenizer = make_tokenizer(vocab_file)
        >>> model = MultitaskBert(build_encoder("tiny", tokenizer.vocabulary_size()), tasks=("sst", "sts"))
        >>> predictor = TextPredictor(model, TaskPreprocessor(tokenizer, sequence_length=16))
        >>> outputs = predictor.predict("sst", ["the cat sat", "a dog ran"])
        >>> sorted(outputs), outputs["probabilities"].shape
        (['class_name', 'label', 'probabilities'], (2, 5))
        >>> predictor.predict("similarity", ["the cat sat"], ["the cat ran"])["score"].shape
        (1,)
    """

    def __init__(self, model, preprocessor: TaskPreprocessor, compute_dtype: str | None = None):
        if not model.built:  # the signatures' graphs read the weights; a fresh model has none yet
            task = next(iter(model.task_specs.values()))
            text = tf.constant(["a"])
            model(preprocessor(task, text, text))
        # "int8": the backbone's int8 weights (kerasbert/quantize.py), as an int8 export holds them
        precision = serving_precision(model.backbone, compute_dtype)
        functions = serving_functions(model, preprocessor, compute_dtype=precision)
        self.signatures = {name: spec.head for name, spec in model.task_specs.items()}
        self.signatures.update({head: head for head in list(self.signatures.values()) + ["embed"]})
        self._functions = {name: (tf.function(functions[name][0], input_signature=functions[name][1], autograph=False),
                                  len(functions[name][1])) for name in set(self.signatures.values())}

    @classmethod
    def from_run(cls, model_dir: str, compute_dtype: str | None = None) -> "TextPredictor":
        """The fine-tuning run in `model_dir` (a pipelines.finetune output folder)."""
        _, model, preprocessor = load_finetuned(model_dir)
        return cls(model, preprocessor, compute_dtype)

    def predict(self, task: str, text, text_b=None) -> dict[str, np.ndarray]:
        """The outputs of `task`'s text signature for `text` (and `text_b`, a pair task's)."""
        if task not in self.signatures:
            raise ConfigError(f"No task or signature {task!r}; this model has {sorted(self.signatures)}")
        function, inputs = self._functions[self.signatures[task]]
        texts = [text] if text_b is None else [text, text_b]
        if len(texts) != inputs:
            raise ConfigError(f"{task!r} takes {inputs} list(s) of strings (text_a and text_b for a pair "
                              f"task). Received: {len(texts)}")
        outputs = function(*(tf.constant(list(t), tf.string) for t in texts))
        return {name: value.numpy() for name, value in outputs.items()}
