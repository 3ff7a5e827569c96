"""A minimal static file server, the floor of the ``large-warm`` case: ``GET /<name>`` sends the file with
``os.sendfile`` (no copy through Python), one thread per connection, HTTP/1.1 keep-alive.

``python -m http.server`` copies through Python in 64 kB reads and would be an unfairly low floor; nginx
is not installed here. ``GET /`` answers 200 with an empty body (the readiness check).

    python -m bench.static_server ROOT PORT
"""

from __future__ import annotations

import http.server
import os
import socket
import sys
from pathlib import Path

__all__ = ["serve"]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = Path(".")

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without NODELAY, Nagle's algorithm holds the body's
        # first segment until the client's delayed ACK, 40 ms per small response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:  # quiet: one line per request is noise
        pass

    def do_GET(self) -> None:
        name = self.path.lstrip("/").split("?", 1)[0]
        if not name:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = self.root / name
        if "/" in name or name.startswith(".") or not path.is_file():
            self.send_error(404)
            return
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.flush()
            offset = 0
            out = self.connection.fileno()
            while offset < size:
                sent = os.sendfile(out, handle.fileno(), offset, size - offset)
                if sent == 0:
                    break
                offset += sent


def serve(root: Path, port: int) -> None:
    """Serve ``root`` on ``127.0.0.1:port`` until killed."""
    _Handler.root = root
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
