"""Client for a kerasbert model behind TensorFlow Serving (or `python -m serving`): REST or gRPC.

Timeouts on every call; retries with backoff when the server answers 503 /
UNAVAILABLE (a model still loading, a server restarting).

    python -m serving.client --text "a gripping, funny film"                    # serving_default, REST
    python -m serving.client --signature similarity --text "A man eats." --text_b "Someone is eating."
    python -m serving.client --protocol grpc --port 8500 --signature paraphrase --text "..." --text_b "..."
    python -m serving.client --signature answer --input question="Who led the Normans?" \\
        --input context="The Normans, led by William, conquered England."
    python -m serving.client --signature entities --input text="Peter flew to Brussels ." --json

`--input NAME=VALUE` gives any signature's input by name (repeated, one row each): text as it
is, other dtypes as JSON (`--input token_ids=[2, 7, 3]`). `--text` is the input `text`, or
with `--text_b` the inputs `text_a` and `text_b` (kerasbert's sentence signatures). The
inputs are checked against the signature's (the model's metadata) before the call. Outputs
are printed readably (an answer with its offsets, entities one a line:
`serving/readable_outputs.py`), or as JSON with `--json`.

Example (`server`: a `python -m serving` of a toy model, y = 2 x; for an export of kerasbert's,
`ServingClient("kerasbert", rest_port=8501).predict("sentiment", {"text": ["a fine film"]})`):
    >>> client = ServingClient("toy", rest_port=server.rest_port, grpc_port=server.grpc_port)
    >>> client.predict("serving_default", {"x": [[1.0, 2.0]]})
    {'rows': [1], 'y': [[2.0, 4.0]]}
    >>> client.signature("strings")  # its inputs' dtypes and its outputs, from the model's metadata
    {'inputs': {'text': 'DT_STRING'}, 'outputs': ['length', 'upper_bytes']}
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import urllib.error
import urllib.request

from serving.readable_outputs import readable


class ServingError(RuntimeError):
    """The server answered with an error; `code` is the HTTP status or gRPC code name,
    UNREACHABLE when no server answered at all (nothing listening: retried like a 503), or
    NOT_REST when what answered is not a REST server (the gRPC port)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class ServingClient:
    def __init__(self, model: str, host: str = "127.0.0.1", rest_port: int = 8501, grpc_port: int = 8500,
                 protocol: str = "rest", timeout: float = 10.0, retries: int = 3, backoff: float = 0.5,
                 version: int | None = None, label: str | None = None, verbose: bool = False):
        if protocol not in ("rest", "grpc"):
            raise ValueError(f"protocol must be rest or grpc. Received: {protocol!r}")
        self.model, self.host, self.protocol = model, host, protocol
        self.rest_port, self.grpc_port = rest_port, grpc_port
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.version, self.label, self.verbose = version, label, verbose
        self._stub = None
        self._signatures: dict[str, dict] | None = None  # the model's metadata, read once

    def _with_retries(self, call):
        for attempt in range(self.retries + 1):
            try:
                return call()
            except ServingError as error:
                if error.code not in (503, "UNAVAILABLE", "UNREACHABLE") or attempt == self.retries:
                    raise
            time.sleep(self.backoff * 2**attempt)

    def predict(self, signature: str, inputs: dict[str, list]) -> dict[str, list]:
        """Columnar predict: {input name: list per example} -> {output name: list per example}."""
        call = self._predict_rest if self.protocol == "rest" else self._predict_grpc
        return self._with_retries(lambda: call(signature, inputs))

    def signature(self, name: str) -> dict | None:
        """A served signature's `inputs` ({name: dtype name, e.g. "DT_STRING"}) and `outputs`
        (names), from the model's metadata (read once); None if the model has no such signature."""
        if self._signatures is None:
            read = self._metadata_rest if self.protocol == "rest" else self._metadata_grpc
            self._signatures = self._with_retries(read)
        return self._signatures.get(name)

    def _metadata_rest(self) -> dict[str, dict]:
        signatures = self._rest(self._model_path() + "/metadata")["metadata"]["signature_def"]["signature_def"]
        return {name: {"inputs": {key: spec.get("dtype", "DT_INVALID") for key, spec in definition["inputs"].items()},
                       "outputs": sorted(definition["outputs"])} for name, definition in signatures.items()}

    def _metadata_grpc(self) -> dict[str, dict]:
        import grpc

        from serving.tensorflow_import import import_tensorflow

        import_tensorflow(self.verbose, with_text_ops=False)  # the protos import TensorFlow: quietly
        from tensorflow.core.framework import types_pb2
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._set_spec(request.model_spec)
        try:
            response = self._grpc_stub().GetModelMetadata(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise ServingError(error.code().name, error.details()) from None
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        return {name: {"inputs": {key: types_pb2.DataType.Name(spec.dtype) for key, spec in definition.inputs.items()},
                       "outputs": sorted(definition.outputs)} for name, definition in signatures.signature_def.items()}

    def _model_path(self) -> str:
        suffix = f"/versions/{self.version}" if self.version else f"/labels/{self.label}" if self.label else ""
        return f"http://{self.host}:{self.rest_port}/v1/models/{self.model}{suffix}"

    def _rest(self, url: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ServingError(error.code, json.loads(error.read() or b"{}").get("error", error.reason)) from None
        except urllib.error.URLError as error:  # connection refused: the server is not up (yet)
            raise ServingError("UNREACHABLE", f"no server answered at {self.host}:{self.rest_port} "
                                              f"({error.reason})") from None
        except (http.client.HTTPException, ConnectionError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ServingError("NOT_REST", f"{self.host}:{self.rest_port} did not answer as TF Serving's REST API "
                                           f"({type(error).__name__}); is it the gRPC port? REST is on "
                                           "--rest_api_port (8501 by default); gRPC takes --protocol grpc") from None

    def _predict_rest(self, signature, inputs):
        outputs = self._rest(self._model_path() + ":predict", {"signature_name": signature, "inputs": inputs})["outputs"]
        if isinstance(outputs, dict):
            return outputs
        # One output comes back bare (TF Serving's columnar format): name it from the metadata.
        return {self.signature(signature)["outputs"][0]: outputs}

    def _grpc_stub(self):
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        if self._stub is None:
            channel = grpc.insecure_channel(f"{self.host}:{self.grpc_port}")
            self._stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return self._stub

    def _set_spec(self, model_spec, signature=None):
        model_spec.name = self.model
        if signature:
            model_spec.signature_name = signature
        if self.version:
            model_spec.version.value = self.version
        elif self.label:
            model_spec.version_label = self.label

    def _predict_grpc(self, signature, inputs):
        import grpc

        from serving.tensorflow_import import import_tensorflow

        import_tensorflow(self.verbose, with_text_ops=False)  # for its TensorProto helpers, quietly
        import tensorflow as tf
        from tensorflow.core.framework import types_pb2
        from tensorflow_serving.apis import predict_pb2

        # The signature's dtypes (a Python 1 is not an int64 by itself); unknown ones inferred,
        # and an unknown signature left for the server to name.
        dtypes = (self.signature(signature) or {"inputs": {}})["inputs"]
        request = predict_pb2.PredictRequest()
        self._set_spec(request.model_spec, signature)
        for name, values in inputs.items():
            dtype = tf.dtypes.as_dtype(types_pb2.DataType.Value(dtypes[name])) if name in dtypes else None
            request.inputs[name].CopyFrom(tf.make_tensor_proto(values, dtype=dtype))
        try:
            response = self._grpc_stub().Predict(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise ServingError(error.code().name, error.details()) from None
        outputs = {}
        for name, proto in response.outputs.items():
            value = tf.make_ndarray(proto)
            outputs[name] = as_text(value.tolist())
        return outputs


def as_text(value):
    """A tensor's `tolist()` with its strings (bytes in a TensorProto) as text, at any depth:
    what the REST API's JSON gives for the same output.

    >>> as_text([[b"Peter", b""], [b"Paris", b"caf\\xc3\\xa9"]])
    [['Peter', ''], ['Paris', 'café']]
    """
    if isinstance(value, list):
        return [as_text(v) for v in value]
    return value.decode() if isinstance(value, bytes) else value


def named_input(text: str) -> tuple[str, str]:
    """`--input`'s type: NAME=VALUE, split at the first `=`."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"an input is NAME=VALUE (e.g. question=\"Who?\"). Received: {text!r}")
    return name, value


def request_inputs(given: list[tuple[str, str]], declared: dict[str, str]) -> dict[str, list]:
    """The command line's (name, value) pairs as columnar inputs, a row per repeat; values
    of inputs `declared` with a dtype other than DT_STRING are parsed as JSON. ValueError
    names the input whose value is not JSON."""
    inputs: dict[str, list] = {}
    for name, value in given:
        if declared.get(name, "DT_STRING") != "DT_STRING":
            try:
                value = json.loads(value)
            except ValueError as error:
                raise ValueError(f"--input {name}={value}: input {name!r} is {declared[name]}, so its value is JSON "
                                 f"(a number or a list): {error}") from None
        inputs.setdefault(name, []).append(value)
    return inputs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=named_input, action="append", default=[], metavar="NAME=VALUE",
                        help="An input of the signature by name (repeat it for each input; a name again: another "
                             "row). Text as it is; other dtypes as JSON: --input token_ids='[2, 7, 3]'.")
    parser.add_argument("--text", default=None, help="The input `text`; with --text_b, the input `text_a`.")
    parser.add_argument("--text_b", default=None, help="The input `text_b`, for a pair signature (paraphrase, ...).")
    parser.add_argument("--signature", "--task", default="serving_default",
                        help="Signature to call: sentiment, paraphrase, similarity, embed, entities, answer, a "
                             "task's own name ... (the model's metadata lists them).")
    parser.add_argument("--json", action="store_true", help="Print the outputs as JSON (as the server gives them).")
    parser.add_argument("--model_name", default="kerasbert", help="Model name on the server.")
    parser.add_argument("--host", default="127.0.0.1", help="Server address.")
    parser.add_argument("--protocol", default="rest", choices=("rest", "grpc"), help="REST or gRPC.")
    parser.add_argument("--port", type=int, default=None, help="Port (default 8501 REST, 8500 gRPC).")
    parser.add_argument("--timeout", type=float, default=10.0, help="Seconds per attempt.")
    parser.add_argument("--retries", type=int, default=3, help="Retries on 503 / UNAVAILABLE / no server answering.")
    parser.add_argument("--verbose", action="store_true", help="Show TensorFlow's C++ start-up lines (gRPC).")
    args = parser.parse_args(argv)
    given = list(args.input)
    if args.text is not None:
        given.append(("text" if args.text_b is None else "text_a", args.text))
    if args.text_b is not None:
        given.append(("text_b", args.text_b))
    if not given:
        parser.error("give the signature's inputs: --input NAME=VALUE (repeated), or --text [--text_b]")
    port = args.port or (8501 if args.protocol == "rest" else 8500)
    client = ServingClient(args.model_name, args.host, rest_port=port, grpc_port=port, protocol=args.protocol,
                           timeout=args.timeout, retries=args.retries, verbose=args.verbose)
    try:
        declared = (client.signature(args.signature) or {"inputs": {}})["inputs"]  # none: the server names it
        if declared and {name for name, _ in given} != set(declared):
            raise ValueError(f"signature {args.signature!r} takes inputs {', '.join(sorted(declared))}; received "
                             f"{', '.join(sorted({name for name, _ in given}))} (pass each as --input NAME=VALUE)")
        outputs = client.predict(args.signature, request_inputs(given, declared))
    except (ServingError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(outputs, indent=2) if args.json else readable(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
