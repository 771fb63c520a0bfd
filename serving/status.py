"""TF Serving's error kinds, each with the HTTP status its REST server answers with
(model_servers/http_server.cc, ToHTTPStatusCode) and the gRPC code its services return.

Every module of the server raises these; the REST and gRPC front ends turn any of them
into their answer, and anything else into INTERNAL (500).

Example:
    >>> error = NotFound("Servable not found for request: Latest(kerasbert)")
    >>> http_status(error), grpc_code(error).name
    (404, 'NOT_FOUND')
"""

from __future__ import annotations

import grpc


class ServingError(Exception):
    """Base of the kinds below, with the codes an error of each kind is answered with."""

    http_status_code = 500
    grpc_status_code = grpc.StatusCode.INTERNAL


class InvalidArgument(ServingError, ValueError):
    http_status_code, grpc_status_code = 400, grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(ServingError):
    http_status_code, grpc_status_code = 400, grpc.StatusCode.FAILED_PRECONDITION


class NotFound(ServingError, LookupError):
    http_status_code, grpc_status_code = 404, grpc.StatusCode.NOT_FOUND


class ResourceExhausted(ServingError):
    http_status_code, grpc_status_code = 429, grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(ServingError, TimeoutError):
    http_status_code, grpc_status_code = 504, grpc.StatusCode.DEADLINE_EXCEEDED


def http_status(error: Exception) -> int:
    return error.http_status_code if isinstance(error, ServingError) else 500


def grpc_code(error: Exception) -> grpc.StatusCode:
    return error.grpc_status_code if isinstance(error, ServingError) else grpc.StatusCode.INTERNAL


def tf_error_message(error: Exception) -> str:
    """The failing op's own message, without TensorFlow's graph-execution framing.

    >>> tf_error_message(tf.errors.InvalidArgumentError(None, None, "Graph execution error:\n\n"
    ...     "Name: <unknown>, Feature: x is required\n\t [[{{node ParseExample}}]]"))
    'Name: <unknown>, Feature: x is required'
    """
    lines = [line for line in getattr(error, "message", str(error)).splitlines() if line.strip()]
    for before, line in zip(lines, lines[1:]):
        if line.lstrip().startswith("[["):
            return before
    return lines[0] if lines else type(error).__name__
