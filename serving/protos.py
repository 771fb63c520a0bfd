"""TF Serving's config messages that `tensorflow-serving-api` does not ship, declared here
with TF Serving's package, field names and numbers, and parsed by protobuf itself:
BatchingParameters (servables/tensorflow/session_bundle_config.proto), MonitoringConfig
and PrometheusConfig (config/monitoring_config.proto), SSLConfig (config/ssl_config.proto).

Example:
    >>> config = parse_text_file(MonitoringConfig, "monitoring.config")
    >>> config.prometheus_config.enable, config.prometheus_config.path
    (True, '/monitoring/prometheus/metrics')
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, wrappers_pb2

_F = descriptor_pb2.FieldDescriptorProto
_WRAPPER = {"int64": ".google.protobuf.Int64Value", "string": ".google.protobuf.StringValue",
            "bool": ".google.protobuf.BoolValue"}
_SCALAR = {"string": _F.TYPE_STRING, "bool": _F.TYPE_BOOL, "int64": _F.TYPE_INT64}

# message -> [(field, number, type, repeated)]; a type "wrapped <t>" is google.protobuf.<T>Value,
# "message <Name>" another message of this file.
MESSAGES = {
    "BatchingParameters": [
        ("max_batch_size", 1, "wrapped int64", False), ("batch_timeout_micros", 2, "wrapped int64", False),
        ("thread_pool_name", 3, "wrapped string", False), ("num_batch_threads", 4, "wrapped int64", False),
        ("max_enqueued_batches", 5, "wrapped int64", False), ("allowed_batch_sizes", 6, "int64", True),
        ("pad_variable_length_inputs", 7, "bool", False), ("enable_large_batch_splitting", 8, "wrapped bool", False),
        ("max_execution_batch_size", 9, "wrapped int64", False)],
    "PrometheusConfig": [("enable", 1, "bool", False), ("path", 2, "string", False)],
    "MonitoringConfig": [("prometheus_config", 1, "message PrometheusConfig", False)],
    "SSLConfig": [("server_key", 1, "string", False), ("server_cert", 2, "string", False),
                  ("custom_ca", 3, "string", False), ("client_verify", 4, "bool", False)],
}


def _message_classes() -> dict:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(name="kerasbert_serving_configs.proto", package="tensorflow.serving",
                                              dependency=["google/protobuf/wrappers.proto"], syntax="proto3")
    for name, fields in MESSAGES.items():
        message = file.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind.startswith("wrapped "):
                message.field.add(name=field, number=number, type=_F.TYPE_MESSAGE, label=label,
                                  type_name=_WRAPPER[kind.split()[1]])
            elif kind.startswith("message "):
                message.field.add(name=field, number=number, type=_F.TYPE_MESSAGE, label=label,
                                  type_name=".tensorflow.serving." + kind.split()[1])
            else:
                message.field.add(name=field, number=number, type=_SCALAR[kind], label=label)
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.serving.{name}"))
            for name in MESSAGES}


_CLASSES = _message_classes()
BatchingParameters = _CLASSES["BatchingParameters"]
MonitoringConfig = _CLASSES["MonitoringConfig"]
SSLConfig = _CLASSES["SSLConfig"]


def parse_text(message_class, text: str):
    """A text proto as a message of `message_class`."""
    message = message_class()
    text_format.Parse(text, message)
    return message


def parse_text_file(message_class, path: str):
    """A text proto file as a message; a file that does not parse names itself."""
    with open(path) as f:
        text = f.read()
    try:
        return parse_text(message_class, text)
    except text_format.ParseError as error:
        raise ValueError(f"{path}: not a {message_class.DESCRIPTOR.name} text proto: {error}") from None
