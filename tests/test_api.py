"""The public API: every name in `kerasbert.__all__` imports from the top level and
documents itself with an example; `import kerasbert` alone starts no TensorFlow."""

import inspect
import subprocess
import sys

import pytest

import kerasbert
from conftest import ROOT


@pytest.mark.parametrize("name", kerasbert.__all__)
def test_public_name_imports_from_the_top_level_with_an_example(name):
    namespace = {}
    exec(f"from kerasbert import {name}", namespace)
    value = namespace[name]
    assert value.__module__.startswith("kerasbert."), value.__module__
    doc = inspect.getdoc(value) or ""
    assert len(doc) > 40, f"{name} has no docstring"
    assert ">>>" in doc, f"{name}'s docstring has no example"


def test_unknown_names_are_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'BertPretrainerr'"):
        kerasbert.BertPretrainerr  # noqa: B018


def test_import_is_lazy():
    code = ("import sys, kerasbert; assert 'tensorflow' not in sys.modules; "
            "kerasbert.ModelConfig; assert 'tensorflow' not in sys.modules; "
            "kerasbert.BertPretrainer; assert 'tensorflow' in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_text_pretraining_dataset_feeds_a_pretrainer(tmp_path, tiny_tokenizer):
    from conftest import write_corpus

    corpus = write_corpus(str(tmp_path / "corpus.txt"))
    data = kerasbert.PretrainDataConfig(mask_selection_length=5)
    train = kerasbert.text_pretraining_dataset([corpus], tiny_tokenizer, sequence_length=24, batch_size=4,
                                               data=data)
    x, y, weights = next(iter(train))
    assert x["token_ids"].shape == (4, 24) and x["mask_positions"].shape == (4, 5)
    assert set(y) == {"mlm", "nsp"} and float(weights["mlm"].numpy().sum()) > 0
    heldout = kerasbert.text_pretraining_dataset([corpus], tiny_tokenizer, sequence_length=24, batch_size=4,
                                                 data=data, heldout=True)
    first = [b[0]["token_ids"].numpy() for b in heldout]
    assert 1 <= len(first) < 1000  # one pass, not repeated
    assert all((a == b).all() for a, b in zip(first, [b[0]["token_ids"].numpy() for b in heldout]))

    encoder = kerasbert.build_encoder(kerasbert.ModelConfig(preset="custom", num_layers=1, hidden_dim=8,
                                                            num_heads=2), tiny_tokenizer.vocabulary_size())
    model = kerasbert.BertPretrainer(encoder, mask_selection_length=5)
    import keras
    model.compile(**kerasbert.pretraining_compile_args(model, keras.optimizers.AdamW(1e-3)))
    history = model.fit(train, steps_per_epoch=2, epochs=1, validation_data=heldout, verbose=0)
    assert {"mlm_loss", "nsp_loss", "val_mlm_accuracy"} <= set(history.history)


def test_too_little_text_for_one_batch_is_a_clear_error(tmp_path, tiny_tokenizer):
    corpus = tmp_path / "short.txt"
    corpus.write_text("The cat sat. The dog ran.\n\nThe mat. The cats ran fast.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="fewer than one batch"):
        kerasbert.text_pretraining_dataset([str(corpus)], tiny_tokenizer, batch_size=32)
