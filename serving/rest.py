"""TF Serving's REST API on aiohttp.

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   signature defs
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict    (also :classify, :regress)

Why aiohttp: a maintained HTTP/1.1 server whose parser is llhttp (Node.js's, in C): it
reads chunked bodies, refuses malformed or conflicting Content-Length and
Transfer-Encoding headers (no request smuggling), bounds header sizes, and serves
every connection from one event loop, so a slow client holds a few kilobytes, never a
thread. TensorFlow work runs on a pool of `num_threads` threads (TF Serving's
--rest_api_num_threads).

What a client can make the server hold is bounded: at most `max_connections` open
connections (at the cap, the one idle longest is closed for the new one:
serving/connections.py), a connection with no request under way closed after
`keepalive_timeout` (from its accept or its last response), headers within llhttp's
limits, a body of at most `max_body_bytes` (413 beyond, before any 100 Continue) that must arrive
within the request's deadline (408 if not), and request data reserved from budgets of
bytes before it is read or decoded (memory_budget); what a request asks beside what it holds
is refused at once if it can never fit, never waited for. The deadline
(--rest_api_timeout_in_ms) travels with the request to the session: when it passes, the
client is answered 504 and the request's work stops at its next step.

Every error body is {"error": "..."} with TF Serving's status code for it (status.py);
a path outside /v1/ gets libevent's 404 page, as TF Serving's dispatcher sends it.

Example:
    >>> from serving.session import DirectSession
    >>> server = RestServer(manager, DirectSession(), ServerBudgets(64 << 20), port=0)  # 0: any free port
    >>> port = server.start()
    >>> import urllib.request
    >>> urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/toy:predict", b'{"instances": [[1.0, 2.0]]}').read()
    b'{"predictions": [{"rows": 1, "y": [2.0, 4.0]}]}'
    >>> server.stop()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import threading
import time
import urllib.parse

import aiohttp
import uvloop
from aiohttp import web
from google.protobuf import json_format
from tensorflow_serving.apis import get_model_metadata_pb2

from serving import classify_regress, json_parse, json_request
from serving.connections import make_room
from serving.json_costs import arrays_cost, buffer_cost, decode_cost, response_cost, writing_cost
from serving.json_response import dumps_response
from serving.memory_budget import SMALL_BODY_BYTES, ServerBudgets
from serving.metrics import ServingMetrics
from serving.manager import ModelManager
from serving.pools import WorkerPool
from serving.predict import Predictor, run_without_loop
from serving.status import (BodyTimeout, BodyTooLarge, Cancelled, DeadlineExceeded, FailedPrecondition,
                            InvalidArgument, ResourceExhausted, code_name, forget_frames, http_status)

log = logging.getLogger(__name__)

HANDLER_PATH_RE = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)  # HttpRestApiHandler::kPathRegex
_MODEL_PATH = r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
PREDICT_RE = re.compile(_MODEL_PATH + r":(?P<method>classify|regress|predict)", re.IGNORECASE)
STATUS_RE = re.compile(r"/v1/models(?:/(?P<name>[^/:]+))?(?:/versions/(?P<version>\d+)|"
                       r"/labels/(?P<label>[^/:]+))?(?P<metadata>/metadata)?", re.IGNORECASE)
NOT_FOUND_PAGE = ("<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n<H1>Not Found</H1>\n"
                  "</BODY></HTML>\n")  # libevent's evhttp_send_error(req, HTTP_NOTFOUND, NULL)
SMALL_RESPONSE_COST = 4 << 20  # a response whose writing costs more is written on the pool
CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
                "Access-Control-Allow-Headers": "Content-Type"}  # http_rest_api_util.cc AddCORSHeaders


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


class _Refused(asyncio.Protocol):
    """A connection over the limit while every other has a request under way: closed as
    soon as it is accepted."""

    def connection_made(self, transport):
        transport.abort()


class RestServer:
    """The REST front end, on its own event loop in a thread of its own."""

    def __init__(self, manager: ModelManager, session, budgets: ServerBudgets, port: int, host: str = "127.0.0.1",
                 max_body_bytes: int = 64 * 1024 * 1024, timeout_ms: int = 30000, num_threads: int = 8,
                 enable_cors: bool = False, max_connections: int = 1024, keepalive_timeout: float = 10.0,
                 metrics: ServingMetrics | None = None, metrics_path: str | None = None):
        self.manager, self.budgets = manager, budgets
        self.host, self.port = host, port
        self.max_body_bytes = max_body_bytes
        self.timeout = timeout_ms / 1000 if timeout_ms > 0 else None
        self.enable_cors = enable_cors
        self.max_connections, self.keepalive_timeout = max_connections, keepalive_timeout
        self.metrics = metrics or ServingMetrics(enabled=False)
        self.predictor = Predictor(manager, session, self.metrics)
        self.examples = classify_regress.ExampleRunner(manager, session, self.metrics)
        self.metrics_path = metrics_path  # where Prometheus scrapes (None: not exported)
        self.pool = WorkerPool(num_threads, "rest")
        self.loop = uvloop.new_event_loop()  # libuv's loop, in C: less time per request than asyncio's own
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._server = None

    # --- Life cycle -----------------------------------------------------------------------

    def start(self) -> int:
        """Binds and starts serving; returns the port (a free one if `port` was 0)."""
        started = concurrent.futures.Future()

        def serve():
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._start())
            except BaseException as error:
                started.set_exception(error)
                return
            started.set_result(self._server.sockets[0].getsockname()[1])
            self.loop.run_forever()

        self._thread = threading.Thread(target=serve, name="rest-loop", daemon=True)
        self._thread.start()
        self.port = started.result()
        return self.port

    async def _start(self) -> None:
        app = web.Application(client_max_size=self.max_body_bytes, handler_args={
            "keepalive_timeout": self.keepalive_timeout, "max_field_size": 8190, "max_headers": 100,
            "lingering_time": 5.0, "auto_decompress": False})  # TF Serving reads bodies as sent
        app.router.add_route("*", "/{tail:.*}", self._handle, expect_handler=self._expect)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        handler_factory = self._runner.server

        def protocol():
            if not make_room(handler_factory.connections, self.max_connections):
                return _Refused()
            return handler_factory()
        self._server = await self.loop.create_server(protocol, self.host, self.port, backlog=1024,
                                                     reuse_address=True)

    def stop(self, grace: float = 2.0) -> None:
        async def shutdown():
            self._server.close()
            await self._runner.shutdown()
            await self._runner.cleanup()
        if self._thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(grace + 5)
        except Exception:  # a slow shutdown must not block the process's exit
            log.debug("REST shutdown did not finish cleanly", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.pool.shutdown(wait=False, cancel_futures=True)

    # --- Requests -------------------------------------------------------------------------

    def _json(self, status: int, text: str | bytes | bytearray, headers: dict | None = None) -> web.Response:
        body = text.encode("utf-8") if isinstance(text, str) else text
        response = web.Response(status=status, body=body, headers={"Content-Type": "application/json"})
        if self.enable_cors:
            response.headers.update(CORS_HEADERS)
        if headers:
            response.headers.update(headers)
        return response

    def _error(self, error: Exception) -> web.Response:
        status = http_status(error)
        if status == 500:
            log.error("internal error", exc_info=error)
        response = self._json(status, json.dumps({"error": str(error)}))
        if status == 408:
            response.force_close()
        return response

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue`: a body over --max_body_bytes is refused 413 before the client
        is told to send it (and the connection closed); others get 100 Continue (aiohttp's)."""
        if (request.content_length or 0) > self.max_body_bytes:
            response = self._error(_over_the_limit(request.content_length, self.max_body_bytes))
            response.force_close()
            return response
        return await aiohttp.web_urldispatcher._default_expect_handler(request)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]  # the query is not part of the route
        if path == self.metrics_path:  # http_server.cc ProcessPrometheusRequest
            return web.Response(status=200, body=self.metrics.exposition(), headers={"Content-Type": "text/plain"})
        if not HANDLER_PATH_RE.fullmatch(path):  # never reaches TF Serving's REST handler
            return web.Response(status=404, body=NOT_FOUND_PAGE.encode("latin-1"),
                                headers={"Content-Type": "text/html; charset=ISO-8859-1"})
        method = request.method
        if method == "OPTIONS":  # CORS preflight (http_server.cc, ProcessRequest)
            if re.search(r"https?://", request.headers.get("Origin", "")):
                response = web.Response(status=200)
                if self.enable_cors:
                    response.headers.update(CORS_HEADERS)
                return response
            return self._error(FailedPrecondition("Origin header is missing in CORS preflight"))
        started = time.monotonic()
        deadline = None if self.timeout is None else started + self.timeout
        predict = PREDICT_RE.fullmatch(path)
        status = STATUS_RE.fullmatch(path)
        model, api = None, None
        reservation = body_held = None
        try:
            if method == "POST" and predict:
                model, version, label = _spec(predict)
                api = predict["method"].lower()
                body_held = self.budgets.bodies(request.content_length).reserve(0, deadline)
                body = await self._read_body(request, body_held, deadline)
                cost, deep = decode_cost(body), False
                if cost > self.budgets.decoding.capacity:  # unless nested deeper than a tensor: only some is built
                    shape = await self.loop.run_in_executor(self.pool, json_parse.nesting, body)
                    if shape is not None and shape.depth > json_parse.MAX_BUILT_DEPTH:
                        cost, deep = decode_cost(body, shape), True
                reservation = await self.budgets.decoding.reserve_async(cost, deadline)
                cancelled = _client_gone(request)
                if api == "predict" and len(body) <= SMALL_BODY_BYTES and self.predictor.runs_on_loop and not deep:
                    # Small and batched: decoded and answered on the event loop, queued for its
                    # batch without a thread waiting on it (two hand-offs between threads fewer).
                    body_held.release()
                    call = asyncio.ensure_future(self._predict_on_loop((model, version, label), body, reservation,
                                                                       deadline, cancelled))
                else:
                    call = self.loop.run_in_executor(self.pool, self._call_on_pool, api, (model, version, label),
                                                     [body], deep, body_held, reservation, deadline, cancelled)
                del body
                # The request's memory is in use until its call returns, even if the client was
                # answered 504 before: the reservations are released then, not when the answer is sent.
                call.add_done_callback(lambda _, held=(body_held, reservation): [r.release() for r in held])
                reservation = body_held = None
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    text = await asyncio.wait_for(asyncio.shield(call), remaining)
                except TimeoutError as timeout:
                    if isinstance(timeout, DeadlineExceeded):
                        raise
                    raise DeadlineExceeded("Deadline Exceeded: no answer within --rest_api_timeout_in_ms="
                                           f"{self.timeout * 1000:g}") from None
            elif method == "GET" and status:
                if not status["name"]:
                    raise InvalidArgument("Missing model name in request.")
                model, version, label = _spec(status)
                api = "GetModelMetadata" if status["metadata"] else "GetModelStatus"
                text = (metadata_json(self.manager.metadata(model, version, label)) if status["metadata"]
                        else to_json(self.manager.status(model, version, label)))
            else:
                raise InvalidArgument(f"Malformed request: {method} {path}")
            response = self._json(200, text)
            status = "OK"
        except Exception as raised:  # every failure becomes a JSON error; the server stays up
            status = code_name(raised)
            response = self._error(raised)
            forget_frames(raised)
            if isinstance(raised, BodyTooLarge) and (request.content_length or 0) > 16 * self.max_body_bytes:
                response.force_close()  # not worth reading the rest: answer, then close
        finally:
            for held in (reservation, body_held):
                if held is not None:
                    held.release()
        self.metrics.request(model or "", api or method, "REST", status, time.monotonic() - started)
        return response

    async def _read_body(self, request: web.Request, reservation, deadline: float | None) -> bytearray:
        """The body, reserved from its lane as it arrives; 413 past --max_body_bytes, 429 if
        the lane is full."""
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            raise _over_the_limit(length, self.max_body_bytes)
        body = bytearray()
        content = request.content
        while True:
            try:
                chunk = content.read_nowait()  # what has arrived already: most bodies, whole
                if not chunk and not content.is_eof():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise BodyTimeout("The request body did not arrive within --rest_api_timeout_in_ms")
                    chunk = await asyncio.wait_for(content.readany(), remaining)
            except asyncio.TimeoutError:
                raise BodyTimeout("The request body did not arrive within --rest_api_timeout_in_ms") from None
            except aiohttp.ClientPayloadError as error:  # a malformed chunked body, cut short
                raise InvalidArgument(f"Malformed request body: {error}") from None
            except ConnectionError:  # the client closed its connection: counted (CANCELLED), not an error
                log.debug("REST client closed its connection after %d of %s body bytes", len(body), length)
                raise Cancelled("Cancelled: the client closed its connection while sending the body") from None
            if not chunk:
                return body  # a bytearray: RapidJSON reads it as it is, with no copy
            if len(body) + len(chunk) > self.max_body_bytes:
                raise BodyTooLarge(f"Request body exceeds the limit of {self.max_body_bytes} bytes")
            if not reservation.try_grow(reservation.size + len(chunk)):
                raise ResourceExhausted("Too many request bodies are being received at once: "
                                        f"{reservation.budget.used} of {reservation.budget.capacity} bytes in use")
            body += chunk

    async def _predict_on_loop(self, spec: tuple, body: bytes, reservation, deadline: float | None,
                               cancelled) -> bytes:
        """Predict for a small body, on the event loop, with a session that runs asynchronously."""
        request = JsonPredictInputs(json_request.loads_request(body, deadline), reservation)
        return await self._predict(spec, request, reservation, deadline, cancelled, on_loop=True)

    async def _predict(self, spec: tuple, request: "JsonPredictInputs", reservation, deadline: float | None,
                       cancelled, on_loop: bool) -> bytes:
        """Predict: decoded inputs in, the JSON answer out, its memory reserved first. `on_loop`:
        awaited on the event loop (a batching session; a large answer is written on the pool);
        else run on a pool thread by run_without_loop (nothing awaited)."""
        prediction = await self.predictor.predict(spec, request.signature, request, deadline, cancelled, on_loop)
        # from here the request holds its outputs and their JSON
        answer = (prediction.outputs, request.row_format, prediction.servable.output_dtypes(request.signature))
        if not on_loop:  # the text's memory reserved as it is written: what it takes, not its bound
            base = writing_cost(prediction.outputs)
            reservation.resize(base, deadline)
            return dumps_response(*answer, reserve=lambda size: reservation.grow(base + buffer_cost(size), deadline))
        cost = response_cost(prediction.outputs, request.row_format)
        await reservation.resize_async(cost, deadline)
        if cost <= SMALL_RESPONSE_COST:
            return dumps_response(*answer)
        return await self.loop.run_in_executor(self.pool, dumps_response, *answer)

    def _call_on_pool(self, api: str, spec: tuple, body_holder: list, deep: bool, body_held, reservation,
                      deadline: float | None, cancelled) -> bytes:
        """Predict, classify or regress: JSON in, JSON out (runs on the pool). `body_holder`
        holds the only other reference to the body, so it is freed once parsed; `deep`: it
        nests deeper than a tensor (json_parse.parse)."""
        with self.budgets.decoding.one_call(reservation):  # what it asks beyond its share: at once or never
            document = json_request.loads_request(body_holder.pop(), deadline, deep)
            body_held.release()
            if api == "predict":
                request = JsonPredictInputs(document, reservation)
                del document
                return run_without_loop(self._predict(spec, request, reservation, deadline, cancelled,
                                                      on_loop=False))
            signature = json_request.signature_name(document)
            servable = self.manager.get(*spec)  # held until the response is built
            request = classify_regress.input_from_json(document)
            del document
            reservation.grow(reservation.size + classify_regress.serialized_size(request), deadline)
            if api == "classify":
                result = self.examples.classify(spec[0], servable, signature, request, deadline, cancelled)
                return classify_regress.dumps_classification(result).encode()
            result = self.examples.regress(spec[0], servable, signature, request, deadline, cancelled)
            return classify_regress.dumps_regression(result).encode()


class JsonPredictInputs:
    """A REST Predict body's inputs, decoded (json_request) for the servable Predict finds;
    `row_format` then says how the answer is written. The document is dropped once decoded,
    and the request's reservation (`held`) shrunk to what its arrays hold, so the model's
    work has the room the document took."""

    def __init__(self, document: dict, held):
        self.document, self.signature, self.row_format = document, json_request.signature_name(document), None
        self.held = held

    def __call__(self, servable) -> dict:
        document, self.document = self.document, None
        inputs, self.row_format = json_request.parse_predict_inputs(document, servable.input_dtypes(self.signature))
        del document
        self.held.resize(min(self.held.size, arrays_cost(inputs)), None)  # only gives back
        return inputs


def _over_the_limit(length: int, max_body_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(f"Request body of {length} bytes exceeds the limit of {max_body_bytes} bytes")


def _client_gone(request: web.Request):
    """True once the REST client has closed its connection: the session asks between slices of
    model work, as it asks a gRPC call whether it was cancelled."""
    def gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()
    return gone


def _spec(match):
    name = urllib.parse.unquote(match["name"])
    digits = match["version"]
    # TF Serving's SimpleAtoi into an int64: leading zeros are fine, past 2**63 - 1 is refused.
    # The length is checked first: Python refuses to convert more than 4,300 digits.
    significant = digits.lstrip("0") or "0" if digits else None
    if significant and (len(significant) > 19 or int(significant) >= 2**63):
        raise InvalidArgument(f"Failed to convert version: {digits} to numeric.")
    version = int(significant) if significant else None
    label = urllib.parse.unquote(match["label"]) if match["label"] else None
    return name, version, label
