"""TF Serving's REST API on a threading HTTP/1.1 server (stdlib `http.server`).

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   signature defs
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict    (also :classify, :regress)

Every error body is {"error": "..."} with TF Serving's status code for it; a bad
request never takes the server down. Bodies over `max_body_bytes` are refused.

Example:
    >>> server = make_rest_server(store, port=8501, predictor=predict_fn)
    >>> threading.Thread(target=server.serve_forever, daemon=True).start()
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from tensorflow_serving.apis import get_model_metadata_pb2

from serving import examples, json_tensor
from serving.model_store import ModelStore
from serving.status import DeadlineExceeded, FailedPrecondition, InvalidArgument, http_status

log = logging.getLogger(__name__)

HANDLER_PATH_RE = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)  # HttpRestApiHandler::kPathRegex
_MODEL_PATH = r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
PREDICT_RE = re.compile(_MODEL_PATH + r":(?P<method>classify|regress|predict)", re.IGNORECASE)
STATUS_RE = re.compile(r"/v1/models(?:/(?P<name>[^/:]+))?(?:/versions/(?P<version>\d+)|"
                       r"/labels/(?P<label>[^/:]+))?(?P<metadata>/metadata)?", re.IGNORECASE)


def to_json(message) -> str:
    """A proto as TF Serving prints it: field names as in the .proto, defaults included."""
    return json_format.MessageToJson(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


def metadata_json(response) -> str:
    """TF Serving's metadata JSON (http_rest_api_util.cc, ToJsonString): the model spec, then
    the SignatureDefMap unpacked from its Any, so no "@type" key, field names as in the protos."""
    signatures = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signatures)
    return (f'{{\n"model_spec":{to_json(response.model_spec)},\n'
            f'"metadata": {{"signature_def": {to_json(signatures)}}}\n}}\n')


def predict_json(store: ModelStore, predictor, name: str, version, label, body: bytes) -> str:
    document = json_tensor.loads_request(body)
    signature = json_tensor.signature_name(document)
    servable = store.get(name, version, label)  # held until the response is built
    inputs, row_format = json_tensor.parse_predict_inputs(document, servable.input_dtypes(signature))
    outputs = predictor(servable, signature, inputs)
    return json_tensor.dumps_response(outputs, row_format, servable.output_dtypes(signature))


def classify_regress_json(store: ModelStore, verb: str, name: str, version, label, body: bytes) -> str:
    document = json_tensor.loads_request(body)
    signature = json_tensor.signature_name(document)
    request = examples.input_from_json(document)
    servable = store.get(name, version, label)
    check = store.signature_method_name_check
    if verb == "classify":
        return examples.dumps_classification(examples.classify(servable, signature, request, check))
    return examples.dumps_regression(examples.regress(servable, signature, request, check))


class RestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    disable_nagle_algorithm = True  # else header and body writes wait on the client's delayed ACK
    server_version = "kerasbert-serving"
    store: ModelStore
    predictor = None
    max_body_bytes = 64 * 1024 * 1024
    timeout_seconds: float | None = None
    runner: concurrent.futures.ThreadPoolExecutor

    def log_message(self, format, *args):  # access log only at debug level
        log.debug("%s - %s", self.address_string(), format % args)

    def _send(self, code: int, body: str, content_type: str | None = "application/json") -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        """What libevent's evhttp_send_error(req, HTTP_NOTFOUND, NULL) sends: TF Serving's
        answer to a path outside /v1/ (its handler's kPathRegex)."""
        self._send(404, "<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n<H1>Not Found</H1>\n"
                        "</BODY></HTML>\n", content_type="text/html; charset=ISO-8859-1")

    def _error(self, error: Exception) -> None:
        code = http_status(error)
        if code == 500:
            log.exception("internal error")
        self._send(code, json.dumps({"error": str(error)}))

    def _read_body(self) -> bytes:
        """The request body. One over --max_body_bytes is read and dropped in pieces, so the
        client, still sending, gets the answer rather than a reset connection."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.max_body_bytes:
            if length > 16 * self.max_body_bytes:
                self.close_connection = True  # not worth reading: answer, then close
            else:
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 20))
                    if not chunk:  # the client stopped sending
                        break
                    left -= len(chunk)
            raise InvalidArgument(f"Request body of {length} bytes exceeds the limit "
                                              f"of {self.max_body_bytes} bytes")
        return self.rfile.read(length) if length else b""

    def _route(self, method: str) -> None:
        path = urllib.parse.urlsplit(self.path).path  # the query is not part of the route
        try:
            body = self._read_body()  # every body is read, so a kept-alive connection stays in step
        except Exception as error:
            self._error(error)
            return
        if not HANDLER_PATH_RE.fullmatch(path):  # never reaches TF Serving's REST handler
            self._not_found()
            return
        if method == "OPTIONS":  # CORS preflight (http_server.cc, RestApiRequestDispatcher)
            if re.search(r"https?://", self.headers.get("Origin", "")):
                self._send(200, "", content_type=None)
            else:
                self._error(FailedPrecondition("Origin header is missing in CORS preflight"))
            return
        try:
            predict = PREDICT_RE.fullmatch(path)
            status = STATUS_RE.fullmatch(path)
            if method == "POST" and predict:
                name, version, label = self._spec(predict)
                verb = predict["method"].lower()
                if verb == "predict":
                    self._send(200, self._in_time(predict_json, self.store, self.predictor, name, version, label,
                                                  body))
                else:
                    self._send(200, self._in_time(classify_regress_json, self.store, verb, name, version, label,
                                                  body))
            elif method == "GET" and status:
                if not status["name"]:
                    raise InvalidArgument("Missing model name in request.")
                name, version, label = self._spec(status)
                if status["metadata"]:
                    self._send(200, metadata_json(self.store.metadata(name, version, label)))
                else:
                    self._send(200, to_json(self.store.status(name, version, label)))
            else:
                raise InvalidArgument(f"Malformed request: {method} {path}")
        except RecursionError:  # a value nested deeper than any tensor's rank
            self._error(InvalidArgument("JSON value nested too deep to convert to a tensor"))
        except Exception as error:  # every failure becomes a JSON error; the server stays up
            self._error(error)

    def _in_time(self, function, *args) -> str:
        """`function(*args)`, or DEADLINE_EXCEEDED once `timeout_seconds` have passed (the call
        itself runs on to its end in the background)."""
        if self.timeout_seconds is None:
            return function(*args)
        future = self.runner.submit(function, *args)
        try:
            return future.result(timeout=self.timeout_seconds)
        except concurrent.futures.TimeoutError:
            raise DeadlineExceeded(f"Deadline Exceeded: no answer within --rest_api_timeout_in_ms="
                                   f"{self.timeout_seconds * 1000:g}") from None

    @staticmethod
    def _spec(match):
        name = urllib.parse.unquote(match["name"])
        version = int(match["version"]) if match["version"] else None
        if version is not None and version >= 2**63:  # TF Serving's SimpleAtoi into an int64
            raise InvalidArgument(f"Failed to convert version: {match['version']} to numeric.")
        label = urllib.parse.unquote(match["label"]) if match["label"] else None
        return name, version, label

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    def do_DELETE(self):
        self._route("DELETE")

    def do_OPTIONS(self):
        self._route("OPTIONS")


def make_rest_server(store: ModelStore, port: int, predictor, host: str = "127.0.0.1",
                     max_body_bytes: int = 64 * 1024 * 1024, timeout_ms: int = 30000) -> ThreadingHTTPServer:
    """A REST server bound to host:port (port 0 picks a free one: see server_address).

    `timeout_ms` is TF Serving's --rest_api_timeout_in_ms: a predict, classify or regress
    call still running after it is answered 504 DEADLINE_EXCEEDED (<= 0: no limit).
    """
    handler = type("BoundRestHandler", (RestHandler,),
                   {"store": store, "predictor": staticmethod(predictor), "max_body_bytes": max_body_bytes,
                    "timeout_seconds": timeout_ms / 1000 if timeout_ms > 0 else None,
                    "runner": concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="rest-run")})
    server = ThreadingHTTPServer((host, port), handler, bind_and_activate=False)
    server.daemon_threads = True
    server.request_queue_size = 256  # listen backlog: many clients may connect at once
    try:
        server.server_bind()
        server.server_activate()
    except OSError:
        server.server_close()
        raise
    return server
