"""The docstring examples of the public API (`kerasbert.__all__`) run, and show what they say.

Each name's example runs as a doctest in the namespace of the module that defines it (as
`--doctest-modules` would), plus the public names, `keras` and `tf`, in a folder of its own
where `../shared/data` and `pipelines/configs` are the real ones. Examples that train,
load a run that is not there, or are fragments of a user's fit script are listed in
NOT_RUN with the reason; those the doctest phase runs with conftest.py's tiny fixtures are in
DOCTESTS; every public name is in exactly one of the three sets.
"""

import doctest
import inspect
import os
import sys

import pytest

import kerasbert
from conftest import DATA_DIR, ROOT, TINY_VOCAB

RUN = {
    "ModelConfig", "TrainConfig", "HeadsConfig", "KerasbertError", "ConfigError", "DataError", "build_encoder",
    "minilm_checkpoint", "load_tokenizer", "train_vocabulary", "get_task", "task_names",
    "load_examples", "read_training_file", "make_strategy", "ScheduleConfig", "load_config", "save_config",
    "PretrainDataConfig", "FinetuneDataConfig", "Task", "PretrainConfig", "FinetuneConfig",
}
# Run by `pytest --doctest-modules` instead, with the tiny vocabulary, run, export and checkpoints
# the root conftest.py gives examples (vocab_file, tokenizer, run_dir, model, hf_checkpoint, ...).
DOCTESTS = {
    "TextPredictor", "TaskPreprocessor", "make_tokenizer", "load_finetuned", "score_file", "export_model",
    "export_saved_model", "load_transformers", "import_transformers", "export_transformers", "task_dataset",
    "interleave_tasks", "FusedAdamW", "prefer_onednn", "BertPretrainer", "pretraining_compile_args",
    "text_pretraining_dataset", "run_pretraining", "load_encoder", "run_finetuning", "MultitaskBert",
    "TaggingSettings", "SpanSettings",
}
NOT_RUN: dict[str, str] = {}  # name -> why its example does not run (none now)


def test_every_public_name_is_run_or_says_why_not():
    assert not RUN & set(NOT_RUN) and not DOCTESTS & (RUN | set(NOT_RUN))
    assert RUN | set(NOT_RUN) | DOCTESTS == set(kerasbert.__all__)


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory):
    """A folder where the examples' relative paths resolve: ../shared/data, pipelines/configs, runs/."""
    root = tmp_path_factory.mktemp("examples")
    (root / "shared").mkdir()
    (root / "shared" / "data").symlink_to(os.path.abspath(DATA_DIR))
    work = root / "work"
    work.mkdir()
    (work / "pipelines").symlink_to(os.path.join(ROOT, "pipelines"))
    (work / "runs").mkdir()
    (work / "runs" / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    return work


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
@pytest.mark.parametrize("name", sorted(RUN))
def test_the_example_runs(name, example_dir, monkeypatch):
    import keras
    import tensorflow as tf

    monkeypatch.chdir(example_dir)
    value = getattr(kerasbert, name)
    module = sys.modules[value.__module__]
    public = {public_name: getattr(kerasbert, public_name) for public_name in kerasbert.__all__}
    globs = {**vars(module), **public, "keras": keras, "tf": tf, "kerasbert": kerasbert}
    test = doctest.DocTestParser().get_doctest(inspect.getdoc(value), globs, name, module.__file__, 0)
    assert test.examples, f"{name} has no example"
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
