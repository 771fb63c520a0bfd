"""TF Serving's config messages that `tensorflow-serving-api` does not ship, declared here
with TF Serving's package, field names and numbers, and parsed by protobuf itself:
BatchingParameters (servables/tensorflow/session_bundle_config.proto), MonitoringConfig
and PrometheusConfig (config/monitoring_config.proto), SSLConfig (config/ssl_config.proto),
and SerializedInput (apis/internal/serialized_input.proto, there in tensorflow.serving.internal:
an Input whose examples are their serialized bytes).

`parse_text_file` reads a start-up file as TF Serving's ParseProtoTextFile does
(util/proto_util.h), with its errors: a file that cannot be read is TensorFlow's file
system error ("NOT_FOUND: <path>; No such file or directory"), and one that does not parse
logs protobuf's line ("Error parsing text-format tensorflow.serving.ModelServerConfig:
1:1: ...") and is "INVALID_ARGUMENT: Invalid protobuf file: '<path>'".

Example:
    >>> path = tmp_path / "monitoring.config"
    >>> _ = path.write_text('prometheus_config { enable: true path: "/monitoring/prometheus/metrics" }')
    >>> config = parse_text_file(MonitoringConfig, str(path))
    >>> config.prometheus_config.enable, config.prometheus_config.path
    (True, '/monitoring/prometheus/metrics')
"""

from __future__ import annotations

import errno
import logging
import os
import re

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, wrappers_pb2

from serving.status import InvalidArgument, ServingError

log = logging.getLogger(__name__)

_F = descriptor_pb2.FieldDescriptorProto
_WRAPPER = {"int64": ".google.protobuf.Int64Value", "string": ".google.protobuf.StringValue",
            "bool": ".google.protobuf.BoolValue"}
_SCALAR = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "bool": _F.TYPE_BOOL, "int64": _F.TYPE_INT64}

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
    "SerializedExampleList": [("examples", 1, "bytes", True)],
    "SerializedExampleListWithContext": [("examples", 1, "bytes", True), ("context", 2, "bytes", False)],
    "SerializedInput": [("example_list", 1, "message SerializedExampleList", False),  # a oneof in TF Serving
                        ("example_list_with_context", 2, "message SerializedExampleListWithContext", False)],
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
SerializedInput = _CLASSES["SerializedInput"]


def parse_text(message_class, text: str):
    """A text proto as a message of `message_class`."""
    message = message_class()
    text_format.Parse(text, message)
    return message


def status_error(code: grpc.StatusCode, message: str) -> ServingError:
    """An error carrying `code`, for the kinds serving/status.py has no class of."""
    error = ServingError(message)
    error.code = code
    return error


# TensorFlow's ErrnoToCode (tsl/platform/errors.cc), for the errors opening a file meets.
_ERRNO_CODES = {
    errno.ENOENT: grpc.StatusCode.NOT_FOUND, errno.ENODEV: grpc.StatusCode.NOT_FOUND,
    errno.ENXIO: grpc.StatusCode.NOT_FOUND,
    errno.EACCES: grpc.StatusCode.PERMISSION_DENIED, errno.EPERM: grpc.StatusCode.PERMISSION_DENIED,
    errno.EROFS: grpc.StatusCode.PERMISSION_DENIED,
    errno.ENOTDIR: grpc.StatusCode.FAILED_PRECONDITION, errno.EISDIR: grpc.StatusCode.FAILED_PRECONDITION,
    errno.EBUSY: grpc.StatusCode.FAILED_PRECONDITION,
    errno.ENAMETOOLONG: grpc.StatusCode.INVALID_ARGUMENT, errno.EINVAL: grpc.StatusCode.INVALID_ARGUMENT,
    errno.EMFILE: grpc.StatusCode.RESOURCE_EXHAUSTED, errno.ENFILE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errno.ENOMEM: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errno.EFBIG: grpc.StatusCode.OUT_OF_RANGE, errno.EOVERFLOW: grpc.StatusCode.OUT_OF_RANGE,
    errno.EAGAIN: grpc.StatusCode.UNAVAILABLE, errno.EINTR: grpc.StatusCode.UNAVAILABLE,
}


def read_text_file(path: str) -> str:
    """The text of `path`, or TensorFlow's error for a file it cannot read (posix_file_system.cc:
    "<path>; <strerror>", the code errno's). A folder opens, but cannot be mapped: ENODEV.

    >>> read_text_file("/no/such.config")
    Traceback (most recent call last):
    serving.status.ServingError: /no/such.config; No such file or directory
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        number = errno.ENODEV if isinstance(error, IsADirectoryError) else error.errno
        raise status_error(_ERRNO_CODES.get(number, grpc.StatusCode.UNKNOWN),
                           f"{path}; {os.strerror(number) if number else error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:  # the text parser's error, at the first bad byte
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise text_format.ParseError("Invalid UTF-8", line, column) from None


# Where Python's text parser words an error otherwise than protobuf's C++ parser
# (text_format.cc), the C++ wording.
_CXX_WORDING = [
    (re.compile(r"^Expected identifier or number, got (.*)\.$"), r"Expected identifier, got: \1"),
    (re.compile(r"^Expected string but found: '(.*)'$"), r"Expected string, got: \1"),
    (re.compile(r'^Message type ".*" should not have multiple "(.*)" fields\.$'),
     r'Non-repeated field "\1" is specified multiple times.'),
]


def parse_error_text(error: text_format.ParseError, text: str) -> str:
    """"<line>:<column>: <what>", as protobuf's C++ parser reports a text proto's error.

    >>> try:
    ...     text_format.Parse("improperly formatted file", wrappers_pb2.Int64Value())
    ... except text_format.ParseError as error:
    ...     parse_error_text(error, "improperly formatted file")
    '1:1: Message type "google.protobuf.Int64Value" has no field named "improperly".'
    """
    line, column = error.GetLine(), error.GetColumn()
    what = str(error)
    if line is not None:
        what = what.split(" : ", 1)[1] if " : " in what else what
        lines = text.split("\n")
        if 0 < line <= len(lines):  # Python repeats the line; C++ does not
            what = what.removeprefix(f"'{lines[line - 1]}': ")
    for pattern, wording in _CXX_WORDING:
        what = pattern.sub(wording, what)
    if line is None:
        return what
    return f"{line}:{column}: {what}" if column is not None else f"{line}: {what}"


def parse_text_file(message_class, path: str):
    """A start-up file holding a text proto, as TF Serving's ParseProtoTextFile reads it: a
    file that cannot be read fails with TensorFlow's file error; one that does not parse logs
    protobuf's error line and fails INVALID_ARGUMENT "Invalid protobuf file: '<path>'"."""
    return read_text_proto_file(message_class, path)[1]


def read_text_proto_file(message_class, path: str):
    """(the file's text, its message), with parse_text_file's errors."""
    text = ""
    try:
        text = read_text_file(path)
        return text, parse_text(message_class, text)
    except text_format.ParseError as error:
        log.error("Error parsing text-format %s: %s", message_class.DESCRIPTOR.full_name,
                  parse_error_text(error, text))
        raise InvalidArgument(f"Invalid protobuf file: '{path}'") from None
