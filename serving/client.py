"""Client for a kerasbert model behind TensorFlow Serving (or `python -m serving`): REST or gRPC.

Timeouts on every call; retries with backoff when the server answers 503 /
UNAVAILABLE (a model still loading, a server restarting).

    python -m serving.client --text "a gripping, funny film"                    # sentiment, REST
    python -m serving.client --signature similarity --text "A man eats." --text_b "Someone is eating."
    python -m serving.client --protocol grpc --port 8500 --signature paraphrase --text "..." --text_b "..."

The command line sends `--text` as the signature's input `text`, or with `--text_b` as
`text_a` and `text_b` (the inputs of kerasbert's text signatures).

Example:
    >>> client = ServingClient("kerasbert", rest_port=8501)
    >>> client.predict("sentiment", {"text": ["a fine film"]})
    {'label': [3], 'probabilities': [[...]]}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

class ServingError(RuntimeError):
    """The server answered with an error; `code` is the HTTP status or gRPC code name, or
    UNREACHABLE when no server answered at all (nothing listening: retried like a 503)."""

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
        self._output_names: dict[str, list[str]] = {}  # REST: names of single outputs
        self._input_dtypes: dict[str, dict] = {}  # gRPC: input dtypes per signature

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

    def _predict_rest(self, signature, inputs):
        outputs = self._rest(self._model_path() + ":predict", {"signature_name": signature, "inputs": inputs})["outputs"]
        if isinstance(outputs, dict):
            return outputs
        # One output comes back bare (TF Serving's columnar format): name it from the metadata.
        if signature not in self._output_names:
            signatures = self._rest(self._model_path() + "/metadata")["metadata"]["signature_def"]["signature_def"]
            self._output_names[signature] = sorted(signatures[signature]["outputs"])
        return {self._output_names[signature][0]: outputs}

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

    def _grpc_input_dtypes(self, signature):
        """The signature's input dtypes, from GetModelMetadata (a Python 1 is not an int64 by itself)."""
        import grpc
        from tensorflow_serving.apis import get_model_metadata_pb2

        if signature not in self._input_dtypes:
            request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
            self._set_spec(request.model_spec)
            try:
                response = self._grpc_stub().GetModelMetadata(request, timeout=self.timeout)
            except grpc.RpcError as error:
                raise ServingError(error.code().name, error.details()) from None
            signatures = get_model_metadata_pb2.SignatureDefMap()
            response.metadata["signature_def"].Unpack(signatures)
            definition = signatures.signature_def.get(signature)
            self._input_dtypes[signature] = {k: v.dtype for k, v in definition.inputs.items()} if definition else {}
        return self._input_dtypes[signature]

    def _predict_grpc(self, signature, inputs):
        import grpc

        from serving.tensorflow_import import import_tensorflow

        import_tensorflow(self.verbose, with_text_ops=False)  # for its TensorProto helpers, quietly
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        dtypes = self._grpc_input_dtypes(signature)
        request = predict_pb2.PredictRequest()
        self._set_spec(request.model_spec, signature)
        for name, values in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(values, dtype=dtypes.get(name)))
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", required=True, help="Sentence (or first sentence of a pair).")
    parser.add_argument("--text_b", default=None, help="Second sentence, for a pair signature (paraphrase, ...).")
    parser.add_argument("--signature", "--task", default="sentiment",
                        help="Signature to call: sentiment, paraphrase, similarity, embed, ... (the model's "
                             "metadata lists them).")
    parser.add_argument("--model_name", default="kerasbert", help="Model name on the server.")
    parser.add_argument("--host", default="127.0.0.1", help="Server address.")
    parser.add_argument("--protocol", default="rest", choices=("rest", "grpc"), help="REST or gRPC.")
    parser.add_argument("--port", type=int, default=None, help="Port (default 8501 REST, 8500 gRPC).")
    parser.add_argument("--timeout", type=float, default=10.0, help="Seconds per attempt.")
    parser.add_argument("--retries", type=int, default=3, help="Retries on 503 / UNAVAILABLE / no server answering.")
    parser.add_argument("--verbose", action="store_true", help="Show TensorFlow's C++ start-up lines (gRPC).")
    args = parser.parse_args(argv)
    inputs = {"text": [args.text]} if args.text_b is None else {"text_a": [args.text], "text_b": [args.text_b]}
    port = args.port or (8501 if args.protocol == "rest" else 8500)
    client = ServingClient(args.model_name, args.host, rest_port=port, grpc_port=port, protocol=args.protocol,
                           timeout=args.timeout, retries=args.retries, verbose=args.verbose)
    try:
        print(json.dumps(client.predict(args.signature, inputs), indent=2))
    except ServingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
