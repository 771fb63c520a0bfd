"""The docstring examples of the public API (`kerasbert.__all__`) run, and show what they say.

Each name's example runs as a doctest in the namespace of the module that defines it (as
`--doctest-modules` would), plus the public names, `keras` and `tf`, in a folder of its own
where `../shared/data` and `pipelines/configs` are the real ones. Examples that train,
load a run that is not there, or are fragments of a user's fit script are listed in
NOT_RUN with the reason; every public name is in exactly one of the two sets.
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
    "minilm_checkpoint", "load_tokenizer", "train_vocabulary", "get_task", "task_names", "TaskPreprocessor",
    "load_examples", "make_strategy", "ScheduleConfig", "load_config", "save_config", "PretrainDataConfig",
    "FinetuneDataConfig", "Task", "PretrainConfig", "FinetuneConfig", "TextPredictor",
}
NOT_RUN = {
    "prefer_onednn": "its True needs a process without TensorFlow; make test runs it (--doctest-modules)",
    "make_tokenizer": "reads runs/vocab.txt, a vocabulary a user trained (pipelines.vocab)",
    # Training runs: minutes to hours.
    "run_pretraining": "trains a model", "run_finetuning": "trains a model",
    "BertPretrainer": "fits 100 steps", "MultitaskBert": "fits 100 steps from MiniLM",
    # Fragments of a user's fit script: `model`, `examples`, `preprocessor` come from lines before.
    "pretraining_compile_args": "a fragment (model)", "text_pretraining_dataset": "a fragment (model)",
    "FusedAdamW": "a fragment (model)", "task_dataset": "a fragment (examples, preprocessor, model)",
    "interleave_tasks": "a fragment (the tasks' datasets)",
    # Run folders and exports that a test would have to train first.
    "load_encoder": "loads runs/pretrain_tiny", "load_finetuned": "loads runs/finetune (MiniLM's 384 wide)",
    "score_file": "scores a fine-tuned model; its figures are a trained run's",
    "export_model": "exports a fine-tuned model", "export_saved_model": "exports runs/finetune",
    # transformers checkpoints a user has (tests/test_transformers_bridge.py writes tiny ones).
    "load_transformers": "loads runs/hf/bert-conll", "import_transformers": "imports runs/hf/bert-sst2",
    "export_transformers": "exports runs/finetune_ner",
}


def test_every_public_name_is_run_or_says_why_not():
    assert not RUN & set(NOT_RUN)
    assert RUN | set(NOT_RUN) == set(kerasbert.__all__)


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
