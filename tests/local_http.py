"""A tiny HTTP server on 127.0.0.1 that serves one payload from memory, well or badly, for download tests.

Routes (each GET is logged as (path, Range header, status) in `server.log`):
  /good        200 with the payload; honours `Range: bytes=N-` with 206
  /truncated   200 with the full Content-Length but only the first half of the bytes, then closes; ignores Range
  /corrupted   200 with the full size, some bytes flipped
  /resume      first request: like /truncated; later ones: like /good (so a Range request resumes)
  /no-resume   first request: like /truncated; later ones: 200 with the whole payload, ignoring Range
  /stall       headers and a few bytes, then silence until the server stops (the client must time out)
  /endless     the model, then zeros without end and no Content-Length (the client must stop at the known size)
  /trickle     the model one byte at a time (each read is quick; only an overall deadline ends it)
  /drip        the model one byte a second: each byte comes well within any socket timeout
  anything else: 404

The server runs in a daemon thread and always stops: on leaving the `with` block, or after `max_seconds`.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ModelServer:
    def __init__(self, payload: bytes, max_seconds: float = 60.0):
        self.payload = payload
        self.corrupted = _flip_bytes(payload)
        self.log: list[tuple[str, str | None, int]] = []
        self._hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._max_seconds = max_seconds
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._watchdog = threading.Timer(max_seconds, self.stop)
        self._watchdog.daemon = True

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.port}/{route.lstrip('/')}"

    def hit(self, path: str) -> int:
        """Count a request to `path`; returns how many came before it."""
        with self._lock:
            n = self._hits.get(path, 0)
            self._hits[path] = n + 1
            return n

    def record(self, path: str, range_header: str | None, status: int) -> None:
        with self._lock:
            self.log.append((path, range_header, status))

    def wait_stop(self) -> None:
        self._stop.wait(self._max_seconds)

    def start(self) -> ModelServer:
        self._thread.start()
        self._watchdog.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._watchdog.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self._thread.join(timeout=5)


def _flip_bytes(payload: bytes) -> bytes:
    data = bytearray(payload)
    for i in range(len(data) // 3, len(data), max(1, len(data) // 7)):
        data[i] ^= 0xFF
    return bytes(data)


def _parse_range(header: str | None, size: int) -> int | None:
    """The start of a `bytes=N-` range, or None when absent or not of that form."""
    if not header or not header.startswith("bytes=") or not header.endswith("-"):
        return None
    start = header[len("bytes="):-1]
    return int(start) if start.isdigit() and int(start) <= size else None


def _handler_for(server: ModelServer):
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a client that stops talking cannot hold a thread for long

        def log_message(self, *args):  # keep test output clean
            pass

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            range_header = self.headers.get("Range")
            earlier = server.hit(path)
            payload = server.payload
            first = earlier == 0
            if path == "/good" or (path == "/resume" and not first):
                self._send_maybe_range(payload, range_header, path)
            elif path == "/truncated" or (path in ("/resume", "/no-resume") and first):
                self._send(200, payload, path, range_header, stop_after=len(payload) // 2)
            elif path == "/no-resume":
                self._send(200, payload, path, range_header)
            elif path == "/corrupted":
                self._send(200, server.corrupted, path, range_header)
            elif path == "/endless":  # the model, then more and more bytes, with no length given
                self._send(200, payload, path, range_header, length=False, forever=True)
            elif path == "/trickle":  # a byte at a time: every read is quick, the whole would take hours
                self._send(200, payload, path, range_header, trickle=True)
            elif path == "/drip":  # a byte a second: a read of a whole chunk would wait days
                self._send(200, payload, path, range_header, trickle=True, pause=1.0)
            elif path == "/stall":
                self._send(200, payload, path, range_header, stop_after=1024, stall=True)
            else:
                self._send(404, b"not found\n", path, range_header)

        def _send_maybe_range(self, payload: bytes, range_header: str | None, path: str) -> None:
            start = _parse_range(range_header, len(payload))
            if start is None:
                self._send(200, payload, path, range_header)
                return
            if start == len(payload):
                self._send(416, b"", path, range_header, content_range=f"bytes */{len(payload)}")
                return
            self._send(206, payload[start:], path, range_header,
                       content_range=f"bytes {start}-{len(payload) - 1}/{len(payload)}")

        def _send(self, status, body, path, range_header, stop_after=None, stall=False, content_range=None,
                  length=True, forever=False, trickle=False, pause=0.01):
            server.record(path, range_header, status)
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            if length:
                self.send_header("Content-Length", str(len(body)))
            if content_range:
                self.send_header("Content-Range", content_range)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                if trickle:
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        if server._stop.wait(pause):
                            return
                else:
                    self.wfile.write(body if stop_after is None else body[:stop_after])
                while forever and not server._stop.is_set():
                    self.wfile.write(b"\0" * 65536)
                self.wfile.flush()
            except OSError:  # the client hung up, as it should
                return
            if stall:
                server.wait_stop()
            self.close_connection = True

    return Handler
