"""The op audit (kerasbert/op_audit.py, pipelines.audit_ops): every op of an export is
TensorFlow's or TF Text's, as the stock tensorflow_model_server has; anything else is an
`error:` line, at export time too. The tagging and span families' export: test_serving_families."""

import os

import pytest
import tensorflow as tf

from conftest import run_main
from kerasbert import op_audit

TOKENIZER_OPS = {"CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets", "FastWordpieceTokenizeWithOffsets"}


def save_python_op_model(path):
    """A SavedModel whose signature calls tf.py_function (EagerPyFunc) inside a nested function."""
    module = tf.Module()

    @tf.function
    def inner(x):
        return tf.py_function(lambda v: v * 2.0, [x], tf.float32)

    module.double = tf.function(lambda x: {"y": inner(x)},
                                input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    tf.saved_model.save(module, path, signatures={"serving_default": module.double})
    return path


def test_sentence_families_export_uses_only_tensorflow_and_tf_text_ops(example_export_dir, capsys):
    audit = op_audit.audit_ops(example_export_dir)  # classes, pair_binary, pair_score, embed
    assert audit.problems() == []
    assert TOKENIZER_OPS <= {op for op, origin in audit.ops.items() if origin == op_audit.TF_TEXT}
    assert audit.ops["MatMul"] == op_audit.TENSORFLOW
    # The tokenizer's ops sit in the library's functions, below the signatures' top graph.
    assert "<graph>" not in audit.functions["FastWordpieceTokenizeWithOffsets"]

    result = run_main(["pipelines.audit_ops", example_export_dir, "--table"], capsys)
    assert result.returncode == 0, result.stderr
    assert "tensorflow_text  FastWordpieceTokenizeWithOffsets" in result.stdout
    assert result.stdout.splitlines()[-1] == audit.summary()
    assert "none from elsewhere" in audit.summary()


def test_a_python_op_in_a_nested_function_is_an_error_line(tmp_path, capsys):
    path = save_python_op_model(str(tmp_path / "py_function" / "1"))
    audit = op_audit.audit_ops(path)
    assert audit.ops["EagerPyFunc"] == op_audit.PYTHON
    assert "<graph>" not in audit.functions["EagerPyFunc"]
    [problem] = audit.problems()
    assert problem.startswith(f"{path}: op EagerPyFunc (in __inference_inner_") and "has no Python" in problem

    result = run_main(["pipelines.audit_ops", path], capsys)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {problem}"
    assert run_main(["pipelines.audit_ops", str(tmp_path)], capsys).stderr.startswith(f"error: {tmp_path}: no saved_model.pb")


def test_an_op_of_neither_library_is_refused_at_export_time(example_run_dir, tmp_path, capsys, monkeypatch):
    """As if TF Text's ops came from a custom op library: the export is refused, an error line
    an op, and no version is left behind."""
    monkeypatch.setattr(op_audit, "tf_text_ops", lambda: frozenset())
    export_base = str(tmp_path / "exports")
    result = run_main(["pipelines.export", "--model_dir", example_run_dir, "--export_base", export_base], capsys)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert {line.split(" op ")[1].split()[0] for line in lines} >= TOKENIZER_OPS
    assert all(line.startswith(f"error: {export_base}/1: op ") and "neither a TensorFlow op" in line for line in lines)
    assert os.listdir(export_base) == []
