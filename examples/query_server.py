"""Query a kerasbert model behind TensorFlow Serving (or `python -m serving`), REST and gRPC.

    python -m serving --port=8500 --rest_api_port=8501 --model_name=kerasbert --model_base_path=$PWD/saved_models/kerasbert &
    python examples/query_server.py --text "A gripping film." --signature sentiment

First through `serving.client` (REST, then gRPC; it retries while a version loads),
then through TF Serving's own gRPC stub, as any client with tensorflow-serving-api does.
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--text", required=True, help="The sentence to send.")
parser.add_argument("--signature", default="embed", help="A signature with one `text` input.")
parser.add_argument("--model_name", default="kerasbert", help="The model's name on the server.")
parser.add_argument("--host", default="127.0.0.1", help="The server's address.")
parser.add_argument("--rest_port", type=int, default=8501, help="Its REST port.")
parser.add_argument("--grpc_port", type=int, default=8500, help="Its gRPC port.")
args = parser.parse_args()

# After the flags, so that --help answers before TensorFlow loads (without its C++ start-up
# lines: serving.tensorflow_import; KERASBERT_VERBOSE=1 shows them).
from serving.tensorflow_import import import_tensorflow  # noqa: E402

import_tensorflow(with_text_ops=False)
import grpc  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402

from serving.client import ServingClient  # noqa: E402


def summary(outputs: dict) -> str:
    return ", ".join(f"{name} {tf.constant(value).shape}: {str(value)[:60]}" for name, value in sorted(outputs.items()))


for protocol in ("rest", "grpc"):
    client = ServingClient(args.model_name, args.host, rest_port=args.rest_port, grpc_port=args.grpc_port,
                           protocol=protocol, retries=5)
    print(f"serving.client {protocol}:", summary(client.predict(args.signature, {"text": [args.text]})))

# The official stub: a PredictRequest with TensorProto inputs, a PredictResponse back.
with grpc.insecure_channel(f"{args.host}:{args.grpc_port}") as channel:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = args.model_name
    request.model_spec.signature_name = args.signature
    request.inputs["text"].CopyFrom(tf.make_tensor_proto([args.text]))
    response = stub.Predict(request, timeout=10.0)
    outputs = {name: tf.make_ndarray(proto).tolist() for name, proto in response.outputs.items()}
    print(f"PredictionServiceStub (version {response.model_spec.version.value}):", summary(outputs))
