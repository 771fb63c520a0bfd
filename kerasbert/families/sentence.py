"""`SentenceFamily`: what the sentence families (classification, regression) share. A task reads
one text or a pair from named columns of CSV, TSV or JSON Lines files
(kerasbert/data/task_files.py); its head reads the sentence embedding (`MultitaskBert.embed`) or,
for a bi-encoder pair, the two sentences' [u, v, |u - v|, u * v]; its signatures are `<head>`,
`<head>_tokens` and TF Serving's `<head>_classify` or `<head>_regress`
(kerasbert/families/sentence_export.py).

Example:
    >>> from kerasbert.tasks import BUILTIN_TASKS
    >>> from kerasbert.families import family_of
    >>> sts = BUILTIN_TASKS["sts"]
    >>> family_of(sts).signature_names(sts), family_of(sts).encoder_of(sts, "cross", "bi")
    (('similarity', 'similarity_tokens', 'similarity_regress'), 'bi')
"""

from __future__ import annotations

import numpy as np

from kerasbert.families.base import Family

LAYOUTS = ("cs224n", "glue")  # the shipped TSV layouts (kerasbert.tasks.Task.layouts)


class SentenceFamily(Family):
    serving_verb = ""  # "classify" or "regress": TF Serving's method of the third signature

    def check(self, task, fail):
        if not task.layouts:
            wanted = ("text_a", "text_b") if task.is_pair else ("text",)
            unwanted = ("text",) if task.is_pair else ("text_a", "text_b")
            missing = [key for key in wanted if not getattr(task, key)]
            if missing:
                fail(f"a {task.kind} task names its text column(s) {' and '.join(wanted)}; missing: {missing}")
            if any(getattr(task, key) for key in unwanted):
                fail(f"a {task.kind} task takes {' and '.join(wanted)}, not {' or '.join(unwanted)}")
        unknown = set(task.layouts) - set(LAYOUTS)
        if unknown:
            fail(f"unknown layout(s) {sorted(unknown)}; known: {LAYOUTS}")
        self.check_labels(task, fail)

    def check_labels(self, task, fail) -> None:
        """The classes or the score range of a declaration."""

    def signature_names(self, task):
        return (task.head, f"{task.head}_tokens", f"{task.head}_{self.serving_verb}")

    def serving_method(self, task):
        return f"tensorflow/serving/{self.serving_verb}"

    def encoder_of(self, task, pair_encoder, sts_encoder):
        return self.pair_encoder_of(task, pair_encoder, sts_encoder) if task.is_pair else ""

    def pair_encoder_of(self, task, pair_encoder: str, sts_encoder: str) -> str:
        return pair_encoder

    # --- Model ----------------------------------------------------------------------------

    def head_input_shape(self, model, name, hidden):
        return (None, 4 * hidden if model.encoder_of(name) == "bi" else hidden)  # [u, v, |u-v|, u*v]

    def head_output(self, model, name, x, training=False):
        return self.head_output_from(model, name, *model.task_embeddings(name, x, training), training=training)

    def head_output_from(self, model, name: str, u, v=None, training: bool = False):
        """The head's output from sentence embeddings: u of the text or pair, v of sentence b (bi)."""
        raise NotImplementedError

    def batch_prediction(self, model, name, x):
        return self.prediction(model, name, *model.task_embeddings(name, x))

    def prediction(self, model, name: str, u, v=None):
        """What evaluation scores and the export serves, from sentence embeddings."""
        raise NotImplementedError

    # --- Evaluation and serving -----------------------------------------------------------

    def prediction_row(self, task, example, reference, prediction):
        if np.ndim(prediction) and task.served_names:
            names = task.served_names
            return [example.uid, names[int(reference)], names[int(np.argmax(prediction))]]
        value = int(np.argmax(prediction)) if np.ndim(prediction) else round(float(prediction), 6)
        return [example.uid, reference, value]

    def serving_outputs(self, task, prediction) -> dict:
        """The named outputs of the text and token signatures."""
        raise NotImplementedError

    def examples_outputs(self, task, outputs: dict) -> dict:
        """TF Serving's :classify (classes, scores) or :regress (outputs) from `serving_outputs`."""
        raise NotImplementedError

    def serving_functions(self, model, preprocessor, graph, name):
        from kerasbert.families.sentence_export import sentence_signatures  # TensorFlow

        return sentence_signatures(self, graph, model.task_specs[name])

    def warmup_inputs(self, task, sentence, other):
        return {"text_a": sentence, "text_b": other} if task.is_pair else {"text": sentence}
