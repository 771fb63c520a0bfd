"""A fine-tuned model on raw strings in Python (kerasbert.TextPredictor) answers as the
export's text signatures do."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import TEXTS_A, TEXTS_B
from kerasbert.errors import ConfigError
from kerasbert.finetuning.text_predictor import TextPredictor


def test_predictions_equal_the_saved_models_signatures(tiny_export):
    run, export = tiny_export
    saved = tf.saved_model.load(export)
    predictor = TextPredictor.from_run(run)
    calls = {"sst": (TEXTS_A,), "paraphrase": (TEXTS_A, TEXTS_B), "similarity": (TEXTS_A, TEXTS_B),
             "embed": (TEXTS_A,)}
    signatures = {"sst": "sentiment", "paraphrase": "paraphrase", "similarity": "similarity", "embed": "embed"}
    for task, texts in calls.items():
        names = ("text",) if len(texts) == 1 else ("text_a", "text_b")
        expected = saved.signatures[signatures[task]](**{n: tf.constant(t) for n, t in zip(names, texts)})
        got = predictor.predict(task, *texts)
        assert set(got) == set(expected), task
        for key, value in expected.items():
            if value.dtype == tf.string:
                assert got[key].tolist() == value.numpy().tolist(), (task, key)
            else:
                np.testing.assert_allclose(got[key], value.numpy(), atol=1e-5, err_msg=f"{task}/{key}")
    with pytest.raises(ConfigError, match=r"No task or signature 'ner'; this model has \['embed', "):
        predictor.predict("ner", TEXTS_A)
    with pytest.raises(ConfigError, match="'sts' takes 2 list"):
        predictor.predict("sts", TEXTS_A)


def test_an_int8_predictor_embeds_close_to_float32(tiny_export):
    run, _ = tiny_export
    exact = TextPredictor.from_run(run).predict("embed", TEXTS_A)["embedding"]
    found = TextPredictor.from_run(run, compute_dtype="int8").predict("embed", TEXTS_A)["embedding"]
    cosine = np.sum(found * exact, -1) / np.linalg.norm(found, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert cosine.min() > 0.99 and np.abs(found - exact).max() > 1e-6  # close, and really int8
