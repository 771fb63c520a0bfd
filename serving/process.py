"""`python -m serving` in a child process on free loopback ports, stopped on exit.

The server is stopped when the `with` block ends, whatever ends it (an error,
Ctrl-C, or SIGTERM to this process, which `stop_on_sigterm` turns into an exception).
`start()` after a kill starts the same command on the same ports, appending to the log.

Example:
    >>> with LocalServer("toy", toy_models, log_path=str(tmp_path / "server.log")) as server:
    ...     version = server.wait_for_version(1)
    ...     answer = urllib.request.urlopen(server.url(":predict"), b'{"instances": [[1.0, 2.0]]}').read()
    >>> version, answer
    (1, b'{"predictions": [{"rows": 1, "y": [2.0, 4.0]}]}')
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, so `finally` blocks run."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


class LocalServer:
    """A child `python -m serving` for one model base path (or, with `config_file`, the
    models of a --model_config_file, `model_name` the one to wait for); REST and gRPC on
    127.0.0.1."""

    def __init__(self, model_name: str, base_path: str | None = None, log_path: str | None = None,
                 extra_flags: list[str] | None = None, poll_seconds: float = 0.5,
                 config_file: str | None = None):
        self.model_name = model_name
        self.base_path = os.path.abspath(base_path) if base_path else None
        self.rest_port, self.grpc_port = free_port(), free_port()
        self.log_path = log_path
        models = ([f"--model_config_file={os.path.abspath(config_file)}"] if config_file else
                  [f"--model_name={model_name}", f"--model_base_path={self.base_path}"])
        self.command = [sys.executable, "-m", "serving", f"--port={self.grpc_port}",
                        f"--rest_api_port={self.rest_port}", *models,
                        f"--file_system_poll_wait_seconds={poll_seconds}"] + (extra_flags or [])
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "LocalServer":
        return self.start()

    def start(self) -> "LocalServer":
        log = open(self.log_path, "a") if self.log_path else subprocess.DEVNULL
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        if log is not subprocess.DEVNULL:
            log.close()  # the child holds its own descriptor
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # the server shuts down cleanly on SIGTERM
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def url(self, path: str = "", model: str | None = None) -> str:
        return f"http://127.0.0.1:{self.rest_port}/v1/models/{model or self.model_name}{path}"

    def timed_post(self, path: str, body: bytes, timeout: float = 900.0) -> tuple[int, bytes, float]:
        """(status, answer, seconds) of one POST of `body` to the model's `path` (":predict"),
        on a connection of its own."""
        connection = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=timeout)
        started = time.monotonic()
        connection.request("POST", f"/v1/models/{self.model_name}{path}", body)
        response = connection.getresponse()
        text = response.read()
        seconds = time.monotonic() - started
        connection.close()
        return response.status, text, seconds

    def _log_tail(self) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-15:])

    def wait_for_version(self, version: int | None = None, timeout: float = 180.0, model: str | None = None) -> int:
        """Blocks until `version` (or any version) of `model` (default: `model_name`) is
        AVAILABLE; returns the version served."""
        deadline = time.time() + timeout
        path = f"/versions/{version}" if version else ""
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.process.returncode}:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(self.url(path, model), timeout=5) as response:
                    states = json.loads(response.read())["model_version_status"]
                available = [int(s["version"]) for s in states if s["state"] == "AVAILABLE"]
                if available:
                    return max(available)
            except (urllib.error.URLError, OSError, ValueError, KeyError):
                pass  # not listening yet, or the version is not loaded yet
            time.sleep(0.25)
        raise TimeoutError(f"{model or self.model_name} version {version or 'any'} not served after {timeout:.0f} s "
                           f"(base path {self.base_path}):\n{self._log_tail()}")
