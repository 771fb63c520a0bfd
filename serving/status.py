"""TF Serving's error kinds, each with the HTTP status its REST server answers with
(model_servers/http_server.cc, ToHTTPStatusCode) and the gRPC code its services return.

Every module of the server raises these; the REST and gRPC front ends turn any of them
into their answer. A TensorFlow error (tf.errors.OpError) keeps its own code, as TF
Serving passes a session's status through; anything else is INTERNAL (500).

Example:
    >>> error = NotFound("Servable not found for request: Latest(kerasbert)")
    >>> http_status(error), grpc_code(error).name
    (404, 'NOT_FOUND')
"""

from __future__ import annotations

import re

import grpc

# ToHTTPStatusCode, by gRPC/absl code.
_HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,  # CLIENT_CLOSED_REQUEST
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


MAX_SHOWN_NAME = 256  # characters of a client's model, signature or input name echoed in an error


def shown(name: str) -> str:
    """A name a request sent, as an error message echoes it: cut to MAX_SHOWN_NAME characters
    (a 1 MB model name is not sent back whole, nor logged so).

    >>> shown("kerasbert"), shown("x" * 1000)[250:]
    ('kerasbert', 'xxxxxx... (1000 characters)')
    """
    name = str(name)
    return name if len(name) <= MAX_SHOWN_NAME else f"{name[:MAX_SHOWN_NAME]}... ({len(name)} characters)"


class ServingError(Exception):
    """Base of the kinds below; `code` is the status an error of each kind carries."""

    code = grpc.StatusCode.INTERNAL


class InvalidArgument(ServingError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(ServingError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class NotFound(ServingError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(ServingError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(ServingError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unimplemented(ServingError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Unknown(ServingError):
    code = grpc.StatusCode.UNKNOWN


class Unavailable(ServingError):
    """The server cannot take the call now (every admin thread busy, a ReloadConfig under way);
    the same call may succeed later."""
    code = grpc.StatusCode.UNAVAILABLE


class Cancelled(ServingError):
    """The client cancelled the request (a gRPC cancel, a REST client that disconnected)."""
    code = grpc.StatusCode.CANCELLED


class BodyTooLarge(InvalidArgument):
    """A REST body larger than --max_body_bytes (HTTP 413)."""


class BodyTimeout(DeadlineExceeded):
    """A REST body that did not arrive before the request's deadline (HTTP 408)."""


class TooLarge(ResourceExhausted):
    """A request that would need more than a whole memory budget: it can never be served
    (HTTP 413 Payload Too Large; RESOURCE_EXHAUSTED over gRPC)."""


# Kinds whose HTTP status is not their code's: REST's own answers about a request's body
# or size, as an HTTP server gives them (TF Serving's libevent answers 413 and 408 so).
_HTTP_STATUS_OF_KIND = ((BodyTooLarge, 413), (TooLarge, 413), (BodyTimeout, 408))


class TensorFlowError(ServingError):
    """A TensorFlow op's error, with its own status code and the op's own message."""

    def __init__(self, error: Exception):
        super().__init__(tf_error_message(error))
        number = getattr(error, "error_code", None)
        self.code = _BY_NUMBER.get(number, grpc.StatusCode.INTERNAL) if number else grpc.StatusCode.INTERNAL


def grpc_code(error: Exception) -> grpc.StatusCode:
    """The status of `error`: a kind above, a TensorFlow OpError's own code, else INTERNAL."""
    if isinstance(error, ServingError):
        return error.code
    number = getattr(error, "error_code", None)  # tf.errors.OpError
    if isinstance(number, int) and number in _BY_NUMBER and number != 0:
        return _BY_NUMBER[number]
    return grpc.StatusCode.INTERNAL


def code_name(error: Exception | None) -> str:
    """The status's name, as TF Serving's metrics label it: "OK", "INVALID_ARGUMENT", ..."""
    return "OK" if error is None else grpc_code(error).name


def http_status(error: Exception) -> int:
    """The status REST answers `error` with: its kind's own, else its code's (ToHTTPStatusCode).

    >>> http_status(BodyTimeout("no body")), http_status(DeadlineExceeded("late"))
    (408, 504)
    """
    for kind, status in _HTTP_STATUS_OF_KIND:
        if isinstance(error, kind):
            return status
    return _HTTP_STATUS[grpc_code(error)]


def forget_frames(error: BaseException) -> None:
    """Drops the frames `error` and the exceptions it chains to keep. A request's error is kept
    where its future is, and its frames hold the request's decoded body: without this, each
    failed request's memory waits for Python's cycle collector."""
    pending, seen = [error], set()
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        pending += [error.__context__, error.__cause__]
        error.__traceback__ = error.__context__ = error.__cause__ = None


_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")  # TensorFlow's name of a traced function


def tf_error_message(error: Exception) -> str:
    """The failing op's own message, without TensorFlow's graph-execution framing.

    >>> import tensorflow as tf
    >>> tf_error_message(tf.errors.InvalidArgumentError(None, None, "Graph execution error:\\n\\n"
    ...     "Name: <unknown>, Feature: x is required\\n\\t [[{{node ParseExample}}]]"))
    'Name: <unknown>, Feature: x is required'
    >>> tf_error_message(ValueError("{{function_node __inference_signature_wrapper_<lambda>_3395}} "
    ...                             "Incompatible shapes: [2,8] vs. [1,8]"))
    'Incompatible shapes: [2,8] vs. [1,8]'
    """
    text = _FUNCTION_NODE.sub("", getattr(error, "message", str(error)))  # internal names stay inside
    lines = [line for line in text.splitlines() if line.strip()]
    for before, line in zip(lines, lines[1:]):
        if line.lstrip().startswith("[["):
            return before
    return lines[0] if lines else type(error).__name__
