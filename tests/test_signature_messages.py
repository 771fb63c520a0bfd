"""A request for a signature the model lacks, or one its method cannot run, answers with the
signatures the model has (TF Serving's message first, so clients matching it still do)."""

import pytest
import tensorflow as tf

from serving.classify_regress import classify, input_from_json, regress
from serving.servable import Servable
from serving.status import InvalidArgument
from tests.serving_models import save_toy


class ThreeOutputs(tf.Module):
    """serving_default as kerasbert exports it: predict-style, several outputs."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def predict(self, text):
        rows = tf.shape(text)[0]
        return {"probabilities": tf.zeros([rows, 5]), "label": tf.zeros([rows], tf.int64),
                "logits": tf.zeros([rows, 5])}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("toy") / "1")
    save_toy(path, 2.0)
    module = ThreeOutputs()
    tf.saved_model.save(module, path + "-three", signatures={"serving_default": module.predict})
    return Servable("toy", 1, path), Servable("three", 1, path + "-three")


def test_classify_without_signature_name_names_the_classify_signatures(toy):
    request = input_from_json({"examples": [{"x": [1.0, 2.0]}]})
    with pytest.raises(InvalidArgument, match=r"(?s)^No classification inputs found .*the model's classify signatures: "
                                              r"classify; pass one as signature_name\)$"):
        classify(toy[0], "", request)
    with pytest.raises(InvalidArgument, match=r"^Expected one or two output Tensors, found 3 \(signature "
                                              r"serving_default; the model's classify signatures: none;"):
        classify(toy[1], "", request)
    with pytest.raises(InvalidArgument, match=r"^Expected one input Tensor\. .*regress signatures: regress;"):
        regress(toy[0], "pair", request)


def test_a_misspelled_signature_lists_the_models_signatures(toy):
    names = "classify, pair, regress, serving_default, strings"
    with pytest.raises(InvalidArgument, match=f'^Serving signature name: "strngs" not found in signature def '
                                              rf"\(the model's signatures: {names}\)$"):
        toy[0].signature("strngs")
    with pytest.raises(InvalidArgument, match=rf"^No signature was found with the name: clasify \(the model's "
                                              rf"signatures: {names}\)$"):
        classify(toy[0], "clasify", input_from_json({"examples": [{"x": [1.0, 2.0]}]}))
