"""Which ops a SavedModel's graphs use, and whether the stock `tensorflow_model_server` has each.

TF Serving's binary runs TensorFlow's own ops and the ops of TF Text's `ops_lib`, which it
links in (tensorflow/serving, tensorflow_serving/model_servers/BUILD:
`"@org_tensorflow_text//tensorflow_text:ops_lib"`); it has no Python. So an export serves
there if every op in every function of its library (not only the signatures' top graphs) is

- `tensorflow`: an op of TensorFlow itself, one with a generated wrapper in `tf.raw_ops`
  (an op library loaded at run time never gets one), other than the three that call back
  into Python (`PyFunc`, `PyFuncStateless`, `EagerPyFunc`: `tf.py_function`, `tf.numpy_function`);
- `tensorflow_text`: registered by one of the installed tensorflow-text's op libraries
  (`tensorflow_text/python/{ops,metrics}/_*.so`, the pip build of `ops_lib`), each asked for the
  ops it registers (TensorFlow's `TF_LoadLibrary` and `TF_GetOpList`, the C API under
  `tf.load_op_library`).

Anything else (`python`, or `other`: a custom op library, an op this TensorFlow does not
know) is a problem: `export_model` refuses the export with an `error:` line an op.

Example:
    >>> audit = audit_ops(export_dir)
    >>> audit.ops["FastWordpieceTokenizeWithOffsets"], audit.ops["MatMul"]
    ('tensorflow_text', 'tensorflow')
    >>> audit.problems()
    []
    >>> print(audit.summary())  # doctest: +ELLIPSIS
    ops: ... from tensorflow, ... from tensorflow_text (CaseFoldUTF8, ...); none from elsewhere
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.util
import os

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.client import pywrap_tf_session  # TF_LoadLibrary, TF_GetOpList

from kerasbert.errors import KerasbertError

TENSORFLOW, TF_TEXT, PYTHON, OTHER = "tensorflow", "tensorflow_text", "python", "other"
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})  # their kernels call the interpreter
SERVABLE = (TENSORFLOW, TF_TEXT)


class OpAuditError(KerasbertError, ValueError):
    """An export uses an op that TF Serving's binary does not have; one `error:` line an op."""


@dataclasses.dataclass(frozen=True)
class OpAudit:
    """The ops of the SavedModel at `path`: `ops` maps each to its origin (`tensorflow`,
    `tensorflow_text`, `python`, `other`), `functions` to the functions that use it."""

    path: str
    ops: dict[str, str]
    functions: dict[str, tuple[str, ...]]

    def problems(self) -> list[str]:
        """One line an op that TF Serving's binary cannot run, naming where it is used."""
        why = {PYTHON: "calls back into Python (tf.py_function / tf.numpy_function), and "
                       "tensorflow_model_server has no Python",
               OTHER: "is neither a TensorFlow op nor one of TF Text's ops_lib, the only ops "
                      "tensorflow_model_server links (a custom op library?)"}
        return [f"{self.path}: op {op} (in {', '.join(self.functions[op][:3])}"
                f"{', ...' if len(self.functions[op]) > 3 else ''}) {why[origin]}"
                for op, origin in sorted(self.ops.items()) if origin not in SERVABLE]

    def summary(self) -> str:
        """One line: how many ops of each origin; TF Text's and any others by name."""
        count = {origin: sorted(op for op, o in self.ops.items() if o == origin)
                 for origin in (TENSORFLOW, TF_TEXT, PYTHON, OTHER)}
        rest = count[PYTHON] + count[OTHER]
        return (f"ops: {len(count[TENSORFLOW])} from tensorflow, {len(count[TF_TEXT])} from tensorflow_text "
                f"({', '.join(count[TF_TEXT])}); "
                + (f"{len(rest)} from elsewhere ({', '.join(rest)})" if rest else "none from elsewhere"))

    def table(self) -> str:
        """Every op a line: origin, name, how many functions use it."""
        return "\n".join(f"{origin:16} {op:40} {len(self.functions[op])} function(s)"
                         for op, origin in sorted(self.ops.items(), key=lambda item: (item[1], item[0])))


def graph_ops(path: str) -> dict[str, tuple[str, ...]]:
    """{op: names of the graphs using it}: every node of every MetaGraph's top graph
    ("<graph>") and of every function in its library; a call of a library function by name
    is not an op.

    Example:
        >>> ops = graph_ops(export_dir)
        >>> ops["RegexSplitWithOffsets"][:1]  # a function of the library
        ('__inference_...',)
        >>> "<graph>" in ops["StatefulPartitionedCall"]  # the signatures' top graph calls them
        True
    """
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    users: dict[str, set[str]] = {}
    for meta_graph in saved_model.meta_graphs:
        library = meta_graph.graph_def.library
        functions = {function.signature.name for function in library.function}
        graphs = [("<graph>", meta_graph.graph_def.node)]
        graphs += [(function.signature.name, function.node_def) for function in library.function]
        for name, nodes in graphs:
            for node in nodes:
                if node.op not in functions:
                    users.setdefault(node.op, set()).add(name)
    return {op: tuple(sorted(names)) for op, names in users.items()}


@functools.cache
def tf_text_ops() -> frozenset[str]:
    """The ops the installed tensorflow-text's op libraries register (loading them, if no
    import of tensorflow_text has yet).

    Example:
        >>> {"FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets", "CaseFoldUTF8"} <= tf_text_ops()
        True
    """
    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None:
        return frozenset()
    names = set()
    for folder in spec.submodule_search_locations:
        for library in sorted(glob.glob(os.path.join(folder, "python", "**", "_*.so"), recursive=True)):
            handle = pywrap_tf_session.TF_LoadLibrary(library)
            try:
                op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetOpList(handle))
            finally:
                pywrap_tf_session.TF_DeleteLibraryHandle(handle)
            names.update(op.name for op in op_list.op)
    return frozenset(names)


def op_origin(op: str) -> str:
    """Where `op` comes from: `tensorflow`, `tensorflow_text`, `python` or `other`.

    Example:
        >>> [op_origin(op) for op in ("MatMul", "CaseFoldUTF8", "EagerPyFunc", "MyCustomOp")]
        ['tensorflow', 'tensorflow_text', 'python', 'other']
    """
    if op in PYTHON_OPS:
        return PYTHON
    if op in tf_text_ops():
        return TF_TEXT
    return TENSORFLOW if hasattr(tf.raw_ops, op) else OTHER


def audit_ops(path: str) -> OpAudit:
    """The ops of the SavedModel at `path` and their origins (example: the module's)."""
    functions = graph_ops(path)
    return OpAudit(path, {op: op_origin(op) for op in functions}, functions)


def check_servable_ops(path: str, name: str | None = None) -> OpAudit:
    """`audit_ops(path)`, raising OpAuditError (a line a problem, naming the export `name`,
    default `path`) if an op is not TF Serving's."""
    audit = dataclasses.replace(audit_ops(path), path=name or path)
    problems = audit.problems()
    if problems:
        raise OpAuditError("\nerror: ".join(problems))
    return audit
