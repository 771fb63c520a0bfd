"""What serving/'s docstring examples are given (`pytest --doctest-modules serving`): the names
below that a docstring's examples use, each made once per session from the tiny models of
tests/serving_models.py, and `tmp_path`, a folder of the docstring's own. Nothing is built,
nor TensorFlow imported, for a docstring that uses none of them (kerasbert's examples run in a
process without TensorFlow).

- toy_models: a base path whose version 1 is save_toy's model (y = 2 x; signatures
  serving_default, strings, pair, classify, regress) with one warm-up Predict request
- servable: that version, loaded (serving.servable.Servable)
- manager: a started serving.manager.ModelManager serving it as model "toy"
- half_plus_two_tflite: a version folder holding only a model.tflite (y = 0.5 x + 2)
"""

import re

import pytest

NAMES = ("toy_models", "servable", "manager", "half_plus_two_tflite", "tmp_path")


@pytest.fixture(scope="session")
def example_toy_models(tmp_path_factory):
    import numpy as np

    from kerasbert.warmup_requests import predict_request, write_warmup_requests
    from tests.serving_models import save_toy

    base = tmp_path_factory.mktemp("toy")
    save_toy(str(base / "1"), scale=2.0)
    write_warmup_requests(str(base / "1"), [predict_request("serving_default", {"x": np.ones((1, 2), np.float32)})])
    return str(base)


@pytest.fixture(scope="session")
def example_servable(example_toy_models):
    from serving.servable import Servable

    servable = Servable("toy", 1, f"{example_toy_models}/1")
    yield servable
    servable.close()


@pytest.fixture(scope="session")
def example_manager(example_toy_models):
    from serving.manager import ModelManager
    from serving.source import ModelConfig

    manager = ModelManager([ModelConfig(name="toy", base_path=example_toy_models, model_platform="tensorflow")])
    manager.start()
    yield manager
    manager.stop()


@pytest.fixture(scope="session")
def example_half_plus_two_tflite(tmp_path_factory):
    from tests.serving_models import save_half_plus_two_tflite

    path = str(tmp_path_factory.mktemp("half_plus_two_tflite") / "123")
    save_half_plus_two_tflite(path)
    return path


@pytest.fixture
def example_tmp_path(tmp_path):
    return tmp_path


@pytest.fixture(autouse=True)
def _serving_example_names(request, doctest_namespace):
    """A serving/ docstring's examples get the NAMES they use, and no others."""
    test = getattr(request.node, "dtest", None)  # a DoctestItem's
    if test is None or not test.name.startswith("serving."):
        return
    for name in NAMES:
        doctest_namespace.pop(name, None)
    used = set(re.findall(r"\w+", "".join(example.source for example in test.examples)))
    for name in used.intersection(NAMES):
        doctest_namespace[name] = request.getfixturevalue(f"example_{name}")
