"""TF Serving's Classify and Regress APIs: tf.Examples in, classes/scores or values out.

A classify signature has method_name `tensorflow/serving/classify`, one input named
`inputs` (serialized tf.Example strings, shape [batch]) and outputs `classes`
(string, [batch, num_classes]) and/or `scores` (float, [batch, num_classes]). A regress
signature has method_name `tensorflow/serving/regress`, the same input, and one float
output `outputs` of shape [batch] or [batch, 1]. Context features are merged into
every example, as TF Serving does: its serialized bytes before each example's.

REST body (TF Serving's FillClassifyRegressRequestFromJson):
    {"signature_name": "...", "context": {"f": value | [values]},
     "examples": [{"g": value | [values]}, ...]}
A JSON integer (or true/false) is an int64 feature, a number with a fraction or an
exponent a float feature, a string or {"b64": ...} a bytes feature.

Example:
    >>> request = input_from_json({"examples": [{"x": [1.0, 2.0]}]})
    >>> result = classify(servable, "classify", request)
    >>> dumps_classification(result)
    '{"results": [[["neg", 0.11920291...], ["pos", 0.880797...]]]}'
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, inference_pb2, input_pb2, regression_pb2

from serving.json_array import decode_b64, is_b64_object, json_text, json_type_name
from serving.json_response import format_decimal
from serving.protos import SerializedInput
from serving.session import DirectSession
from serving.status import InvalidArgument, Unimplemented, shown

CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
_KIND_NAMES = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


# --- JSON -> tf.Example ----------------------------------------------------------------


def _add_value(feature: tf.train.Feature, name: str, value) -> None:
    if isinstance(value, bool):
        kind, item = "int64_list", int(value)
    elif isinstance(value, int):
        if value >= 2**63:
            raise InvalidArgument(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        kind, item = "int64_list", value
    elif isinstance(value, float):
        with np.errstate(over="ignore", under="ignore"):  # rapidjson's GetFloat: past the range, inf
            kind, item = "float_list", float(np.float32(value))
    elif isinstance(value, str):
        kind, item = "bytes_list", value.encode("utf-8")
    elif is_b64_object(value):
        kind, item = "bytes_list", decode_b64(value)
    else:
        raise InvalidArgument(f"Feature: {name} has element with unexpected JSON type: {json_type_name(value)}")
    current = feature.WhichOneof("kind")
    if current not in (None, kind):
        raise InvalidArgument(f"Unexpected element type in feature: {name} expecting type: "
                              f"{_KIND_NAMES[current]}")
    getattr(feature, kind).value.append(item)


def example_from_json(value) -> tf.train.Example:
    """One JSON object of features as a tf.train.Example."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"Example must be JSON object but got JSON {json_type_name(value)}")
    example = tf.train.Example()
    for name, content in value.items():
        feature = example.features.feature[name]
        for item in content if isinstance(content, list) else [content]:
            _add_value(feature, name, item)
    return example


def input_from_json(document: dict) -> input_pb2.Input:
    """The `input` of a Classification/RegressionRequest from a REST body."""
    request = input_pb2.Input()
    if "context" in document:
        target = request.example_list_with_context
        target.context.CopyFrom(example_from_json(document["context"]))
    else:
        target = request.example_list
    if "examples" not in document:
        raise InvalidArgument(f"JSON Value: {json_text(document)} When method is classify, key "
                              "'examples' is expected and was not found")
    examples = document["examples"]
    if not isinstance(examples, list):
        raise InvalidArgument(f"JSON Value: {json_text(document)} Expecting 'examples' value to be "
                              "an list/array")
    if not examples:
        raise InvalidArgument(f"JSON Value: {json_text(document)} 'examples' value is an empty array")
    for value in examples:
        target.examples.add().CopyFrom(example_from_json(value))
    return request


def serialized_examples(request: input_pb2.Input) -> list[bytes]:
    """Each example serialized, the context's bytes before each, as TF Serving's
    InputToSerializedExampleTensor joins them (util.cc): the Input serialized once and read
    back as a SerializedInput, its examples' bytes as sent; parsed, the example's features
    win over the context's, as a merge would. No example is copied or merged as a message
    (that took a second of Python a 4.5 MB context)."""
    kind = request.WhichOneof("kind")
    if kind not in ("example_list", "example_list_with_context"):
        raise InvalidArgument("Input is empty.")
    lists = getattr(SerializedInput.FromString(request.SerializeToString()), kind)
    if kind == "example_list":
        examples = list(lists.examples)
    else:
        context = lists.context
        examples = [context + example for example in lists.examples]
    if not examples:
        raise InvalidArgument("Input is empty.")
    return examples


def count(request: input_pb2.Input) -> int:
    """How many examples the request holds."""
    kind = request.WhichOneof("kind")
    if kind == "example_list":
        return len(request.example_list.examples)
    if kind == "example_list_with_context":
        return len(request.example_list_with_context.examples)
    return 0


def serialized_size(request: input_pb2.Input) -> int:
    """An upper bound, in bytes, of what the serialized examples take in memory, the context
    merged into each (a large context times many examples is large: reserve it first)."""
    kind = request.WhichOneof("kind")
    if kind == "example_list":
        context, examples = 0, request.example_list.examples
    elif kind == "example_list_with_context":
        context = request.example_list_with_context.context.ByteSize()
        examples = request.example_list_with_context.examples
    else:
        return 0
    return 2 * (sum(example.ByteSize() for example in examples) + context * len(examples)) + 96 * len(examples)


# --- Running a signature ------------------------------------------------------------


def fitting_signatures(servable, method: str) -> list[str]:
    """The names of the servable's signatures that `method` (CLASSIFY_METHOD or REGRESS_METHOD)
    can run: one input `inputs`, and classes and/or scores, or one `outputs`."""
    fits = []
    for name in servable.signature_names():
        signature_def = servable.signature_defs[name]
        outputs = set(signature_def.outputs)
        wanted = (outputs and outputs <= {"classes", "scores"} if method == CLASSIFY_METHOD
                  else outputs == {"outputs"})
        if set(signature_def.inputs) == {"inputs"} and wanted:
            fits.append(name)
    return fits


def _not_runnable(message: str, servable, name: str, method: str) -> InvalidArgument:
    """TF Serving's `message`, and the signatures that would run: a request without
    signature_name gets serving_default, which is rarely a classify or regress signature."""
    kind = "classify" if method == CLASSIFY_METHOD else "regress"
    fits = ", ".join(fitting_signatures(servable, method)) or "none"
    return InvalidArgument(f"{message} (signature {shown(name)}; the model's {kind} signatures: {fits}; pass one as "
                           "signature_name)")


def _checked_signature(servable, name: str, method: str, kind: str, check_method_name: bool):
    name = name or "serving_default"
    if name not in servable.signature_defs:
        raise InvalidArgument(f"No signature was found with the name: {shown(name)} (the model's signatures: "
                              f"{', '.join(servable.signature_names())})")
    signature_def = servable.signature_defs[name]
    # TF Serving checks the method name only under --enable_signature_method_name_check
    # (default false: TF2 writes every signature as predict); else the one `inputs` decides.
    if check_method_name and signature_def.method_name != method:
        raise InvalidArgument(f"Expected {kind} signature method_name to be {method}. Was: "
                              f"{signature_def.method_name}")
    if len(signature_def.inputs) != 1:
        raise _not_runnable("Expected one input Tensor.", servable, name, method)
    return name, signature_def


def _check_inputs_key(servable, name: str, signature_def, method: str, kind: str) -> None:
    """After the output count, as classifier.cc and regressor.cc check it."""
    if "inputs" not in signature_def.inputs:
        raise _not_runnable(f"No {kind} inputs found in SignatureDef: {signature_def}", servable, name, method)


def examples_tensor(request: input_pb2.Input) -> np.ndarray:
    """The request's examples, serialized once, as the string vector a signature's `inputs`
    takes (TF Serving's InputToSerializedExampleTensor)."""
    return np.array(serialized_examples(request), dtype=object)


def _run(servable, name: str, examples: np.ndarray, session, deadline, cancelled=None) -> dict[str, np.ndarray]:
    """The signature on serialized examples, through `session` (so batched with other
    requests when batching is on)."""
    return (session or DirectSession()).run(servable, name, {"inputs": examples}, deadline, cancelled)


def check_classify_signature(servable, signature_name: str, check_method_name: bool = False) -> str:
    """The checks of a classify signature before anything runs (TF Serving's
    PreProcessClassification); its name, serving_default when none is given."""
    name, signature_def = _checked_signature(servable, signature_name, CLASSIFY_METHOD, "classification",
                                             check_method_name)
    if len(signature_def.outputs) not in (1, 2):
        raise _not_runnable(f"Expected one or two output Tensors, found {len(signature_def.outputs)}", servable,
                            name, CLASSIFY_METHOD)
    _check_inputs_key(servable, name, signature_def, CLASSIFY_METHOD, "classification")
    if "classes" not in signature_def.outputs and "scores" not in signature_def.outputs:
        raise InvalidArgument('Expected classification signature outputs to contain at least one of '
                              f'"classes" or "scores". Signature was: {signature_def}')
    return name


def classification_result(outputs: dict[str, np.ndarray], batch: int) -> classification_pb2.ClassificationResult:
    """A classify signature's outputs for `batch` examples, checked and converted (TF
    Serving's PostProcessClassificationResult)."""
    classes, scores = outputs.get("classes"), outputs.get("scores")
    for key, value, dtype in (("classes", classes, object), ("scores", scores, np.float32)):
        if value is None:
            continue
        if value.ndim != 2:
            raise InvalidArgument(f"Expected Tensor shape: [batch_size num_classes] but got {list(value.shape)}")
        if value.dtype != dtype:
            expected = "DT_STRING" if dtype is object else "DT_FLOAT"
            raise InvalidArgument(f"Expected {key} Tensor of {expected}. Got: {value.dtype}")
        if value.shape[0] != batch:
            raise InvalidArgument(f"Expected {key} output batch size of {batch}. Got: {value.shape[0]}")
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise InvalidArgument("Tensors class and score should match in dim_size(1). Got "
                              f"{classes.shape[1]} vs. {scores.shape[1]}")
    num_classes = (classes if classes is not None else scores).shape[1]
    result = classification_pb2.ClassificationResult()
    for i in range(batch):
        classifications = result.classifications.add()
        for c in range(num_classes):
            entry = classifications.classes.add()
            if classes is not None:
                entry.label = classes[i, c].decode("utf-8", "replace")
            if scores is not None:
                entry.score = float(scores[i, c])
    return result


def classify(servable, signature_name: str, request: input_pb2.Input, check_method_name: bool = False,
             session=None, deadline: float | None = None, cancelled=None) -> classification_pb2.ClassificationResult:
    """Runs a classify signature (TF Serving's PreProcess/PostProcessClassification)."""
    name = check_classify_signature(servable, signature_name, check_method_name)
    examples = examples_tensor(request)
    return classification_result(_run(servable, name, examples, session, deadline, cancelled), len(examples))


def check_regress_signature(servable, signature_name: str, check_method_name: bool = False) -> str:
    """The checks of a regress signature before anything runs (TF Serving's
    PreProcessRegression); its name, serving_default when none is given."""
    name, signature_def = _checked_signature(servable, signature_name, REGRESS_METHOD, "regression",
                                             check_method_name)
    if len(signature_def.outputs) != 1:
        raise _not_runnable("Expected one output Tensor.", servable, name, REGRESS_METHOD)
    _check_inputs_key(servable, name, signature_def, REGRESS_METHOD, "regression")
    if "outputs" not in signature_def.outputs:
        raise InvalidArgument(f"No regression outputs found in SignatureDef: {signature_def}")
    return name


def regression_result(outputs: dict[str, np.ndarray], batch: int) -> regression_pb2.RegressionResult:
    """A regress signature's output for `batch` examples, checked and converted (TF
    Serving's PostProcessRegressionResult)."""
    values = outputs["outputs"]
    if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
        raise InvalidArgument("Expected output Tensor shape to be either [batch_size] or [batch_size, 1] "
                              f"but got {list(values.shape)}")
    if values.dtype != np.float32:
        raise InvalidArgument(f"Expected output Tensor of DT_FLOAT.  Got: {values.dtype}")
    if values.shape[0] != batch:
        raise InvalidArgument(f"Input batch size did not match output batch size: {batch} vs. {values.shape[0]}")
    result = regression_pb2.RegressionResult()
    for value in values.reshape(-1):
        result.regressions.add(value=float(value))
    return result


def regress(servable, signature_name: str, request: input_pb2.Input, check_method_name: bool = False,
            session=None, deadline: float | None = None, cancelled=None) -> regression_pb2.RegressionResult:
    """Runs a regress signature (TF Serving's PreProcess/PostProcessRegressionResult)."""
    name = check_regress_signature(servable, signature_name, check_method_name)
    examples = examples_tensor(request)
    return regression_result(_run(servable, name, examples, session, deadline, cancelled), len(examples))


def pinned(spec) -> tuple | None:
    """The version or label a ModelSpec names, or None for the latest.

    >>> from tensorflow_serving.apis import model_pb2
    >>> pinned(model_pb2.ModelSpec(name="m", version_label="stable")), pinned(model_pb2.ModelSpec(name="m"))
    (('label', 'stable'), None)
    """
    if spec.HasField("version"):
        return "version", spec.version.value
    return ("label", spec.version_label) if spec.version_label else None


def describe_pin(spec) -> str:
    kind_value = pinned(spec)
    return "the latest version" if kind_value is None else f"{kind_value[0]} {shown(kind_value[1])}"


def multi_inference(servable, request: inference_pb2.MultiInferenceRequest, check_method_name: bool = False,
                    session=None, deadline: float | None = None,
                    cancelled=None) -> inference_pb2.MultiInferenceResponse:
    """Runs every task of a MultiInferenceRequest on its shared input (TF Serving's
    TensorFlowMultiInferenceRunner::Infer, multi_inference.cc): every task is checked first,
    in order (one model name, one version or label (a later task may leave it out), distinct signatures, each found, classify or regress, its
    signature fit for it), then the examples are serialized once and each task's signature
    runs on them; one result per task, in the tasks' order.

    TF Serving runs the signatures in one session run over the union of their outputs; here
    each signature is its own function, so each runs on the same serialized examples."""
    model_name, seen, plan = "", set(), []
    for task in request.tasks:
        spec = task.model_spec
        if not spec.name:
            raise InvalidArgument("Found ModelSpec with an empty model name.")
        if not model_name:
            model_name = spec.name
        elif spec.name != model_name:
            raise InvalidArgument("All ModelSpecs in a MultiInferenceRequest must access the same model name.")
        if task is not request.tasks[0] and pinned(spec) and pinned(spec) != pinned(request.tasks[0].model_spec):
            # TF Serving runs every task on the first task's version, whatever the others name
            # (multi_inference_helper.cc); a task pinned elsewhere would get another model's answer.
            raise InvalidArgument("All ModelSpecs in a MultiInferenceRequest must access the same model version: "
                                  f"task {len(plan)} names {describe_pin(spec)}, the first task "
                                  f"{describe_pin(request.tasks[0].model_spec)}.")
        signature = spec.signature_name or "serving_default"
        if signature in seen:
            raise InvalidArgument(f"Duplicate evaluation of signature: {shown(signature)}")
        seen.add(signature)
        if signature not in servable.signature_defs:
            raise InvalidArgument(f"Requested signature not found in model graph: {shown(signature)}")
        if task.method_name == CLASSIFY_METHOD:
            check_classify_signature(servable, signature, check_method_name)
            plan.append((task, signature, classification_result, "classification_result"))
        elif task.method_name == REGRESS_METHOD:
            check_regress_signature(servable, signature, check_method_name)
            plan.append((task, signature, regression_result, "regression_result"))
        else:
            raise Unimplemented(f"Unsupported signature method_name: {shown(task.method_name)}")
    examples = examples_tensor(request.input)
    outputs = [_run(servable, signature, examples, session, deadline, cancelled) for _, signature, _, _ in plan]
    response = inference_pb2.MultiInferenceResponse()
    for (task, signature, convert, field), output in zip(plan, outputs):
        result = response.results.add()
        getattr(result, field).CopyFrom(convert(output, len(examples)))
        result.model_spec.name = task.model_spec.name
        result.model_spec.version.value = servable.version
        result.model_spec.signature_name = signature
    return response


# --- As the front ends call them -------------------------------------------------------


class ExampleRunner:
    """Classify, Regress and MultiInference through a session, as REST and gRPC both call them,
    their metrics recorded here: for Classify and Regress the model call's latency
    (runtime_latency, as classifier.cc and regressor.cc record it) and the examples
    (request_example_counts, which TF Serving counts for MultiInference only); for
    MultiInference only the examples, once whatever its tasks (multi_inference.cc
    RecordRequestExampleCount). The request's count and latency are the front end's. The
    manager's --enable_signature_method_name_check is read at each call.

    >>> from serving.metrics import ServingMetrics
    >>> metrics = ServingMetrics()
    >>> metrics.load("/toy/1", ok=True, seconds=1.0, model="toy")
    >>> runner = ExampleRunner(manager, DirectSession(), metrics)
    >>> runner.regress("toy", servable, "regress", input_from_json({"examples": [{"x": [1.0, 2.0]}]}))
    regressions {
      value: ...
    }
    <BLANKLINE>
    >>> metrics.example_count_total.value("toy")
    1
    """

    def __init__(self, manager, session, metrics):
        self.manager, self.session, self.metrics = manager, session, metrics

    def classify(self, model: str, servable, signature_name: str, request: input_pb2.Input,
                 deadline: float | None = None, cancelled=None) -> classification_pb2.ClassificationResult:
        """`classify` on the servable of the model named `model`, timed and counted."""
        return self._timed("Classify", classify, model, servable, signature_name, request, deadline, cancelled)

    def regress(self, model: str, servable, signature_name: str, request: input_pb2.Input,
                deadline: float | None = None, cancelled=None) -> regression_pb2.RegressionResult:
        """`regress` on the servable of the model named `model`, timed and counted."""
        return self._timed("Regress", regress, model, servable, signature_name, request, deadline, cancelled)

    def _timed(self, method: str, run, model: str, servable, signature_name: str, request: input_pb2.Input,
               deadline: float | None, cancelled):
        started = time.monotonic()
        result = run(servable, signature_name, request, self.manager.signature_method_name_check, self.session,
                     deadline, cancelled)
        self.metrics.runtime(model, method, time.monotonic() - started)
        self.metrics.examples(model, count(request))
        return result

    def multi_inference(self, model: str, servable, request: inference_pb2.MultiInferenceRequest,
                        deadline: float | None = None, cancelled=None) -> inference_pb2.MultiInferenceResponse:
        """`multi_inference` on the servable of the model named `model`, its examples counted."""
        response = multi_inference(servable, request, self.manager.signature_method_name_check, self.session,
                                   deadline, cancelled)
        self.metrics.examples(model, count(request.input))
        return response


# --- Results -> JSON ------------------------------------------------------------------


def dumps_classification(result: classification_pb2.ClassificationResult) -> str:
    """TF Serving's MakeJsonFromClassificationResult: [[label, score], ...] per example."""
    if not result.classifications:
        raise InvalidArgument("Cannot convert empty ClassificationResults to JSON")
    rows = ["[" + ", ".join(f"[{json_text(c.label)}, {format_decimal(c.score)}]" for c in row.classes) + "]"
            for row in result.classifications]
    return '{"results": [' + ", ".join(rows) + "]}"


def dumps_regression(result: regression_pb2.RegressionResult) -> str:
    """TF Serving's MakeJsonFromRegressionResult: one value per example."""
    if not result.regressions:
        raise InvalidArgument("Cannot convert empty RegressionResults to JSON")
    return '{"results": [' + ", ".join(format_decimal(r.value) for r in result.regressions) + "]}"
