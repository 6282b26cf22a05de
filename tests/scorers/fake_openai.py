"""A fake OpenAI chat-completions server on 127.0.0.1, for tests and the scorer benchmark.

It is deterministic: it decodes the first image of each request (the PNGs OpenAIScorer sends, or
the first frame of a ``video_url``)
and answers with ``top_logprobs`` whose yes/no split is ``p = 0.05 + 0.8 * pixel / 255``
(``+ 0.1`` when the prompt mentions "bright"), where ``pixel`` is the image's mean value. It can
be scripted to fail (HTTP statuses), stall (sleeps), trickle its answer a byte at a time or send a
given JSON answer on the next requests, or to answer without logprobs (``reply``), and records every
request it receives. It listens on the loopback
interface only.
"""

from __future__ import annotations

import base64
import http.server
import json
import math
import struct
import threading
import time
import zlib

import numpy as np


def decode_png(data: bytes) -> np.ndarray:
    """Decodes the 8-bit RGB, filter-0 PNGs that encode_png writes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if tag == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif tag == b"IDAT":
            idat += body
        pos += 12 + length
    rows = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * 3)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(height, width, 3)


def expected_p(pixel: float, prompt: str) -> float:
    return 0.05 + 0.8 * pixel / 255 + (0.1 if "bright" in prompt else 0.0)


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # a client that timed out and hung up is expected (retry tests); anything else is reported
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeServer:
    """A chat-completions server on 127.0.0.1 with scripted failures; records every request."""

    def __init__(self, models=("tiny-vlm",)):
        self.models = list(models)
        self.requests: list[dict] = []
        # per request, in order: int status, ("sleep", s), ("status", code, body), ("trickle", s), ("json", answer),
        # ("raw", text), ("chunked", answer)
        self.script: list = []
        self.delay = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.trickled = 0  # bytes sent by ("trickle", s) steps
        self.reply = "logprobs"  # or "no_answer", "no_logprobs" (logprobs: null), "token_only" (no alternatives)
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, code, payload, headers=()):
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers:
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    step = server.script.pop(0) if server.script else None
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                pending = True

                def answered():  # a request stops counting once its answer is ready, before it is written: the
                    # client may send its next request as soon as it has read this one, before this thread goes on
                    nonlocal pending
                    if pending:
                        pending = False
                        with server._lock:
                            server.in_flight -= 1

                try:
                    if isinstance(step, tuple) and step[0] == "sleep":
                        time.sleep(step[1])
                    elif isinstance(step, tuple) and step[0] == "trickle":  # one byte of the answer every step[1] s
                        payload = json.dumps(server.completion(body)).encode()
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        for i in range(len(payload)):
                            try:
                                self.wfile.write(payload[i:i + 1])
                                self.wfile.flush()
                            except OSError:  # the client hung up
                                break
                            with server._lock:
                                server.trickled += 1
                            time.sleep(step[1])
                        return None
                    elif isinstance(step, tuple) and step[0] == "json":  # this answer, as is
                        return self._send(200, step[1])
                    elif isinstance(step, tuple) and step[0] == "raw":  # these bytes (text), as the body
                        payload = step[1].encode()
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return None
                    elif isinstance(step, tuple) and step[0] == "chunked":  # this answer, without a length
                        payload = json.dumps(step[1]).encode()
                        self.send_response(200)
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for i in range(0, len(payload), 1 << 16):
                            chunk = payload[i:i + (1 << 16)]
                            try:
                                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                            except OSError:  # the client hung up
                                return None
                        self.wfile.write(b"0\r\n\r\n")
                        return None
                    elif isinstance(step, int):
                        headers = [("Retry-After", "0")] if step == 429 else []
                        return self._send(step, {"error": {"message": f"scripted {step}"}}, headers)
                    elif isinstance(step, tuple) and step[0] == "status":  # ("status", code, body[, headers])
                        return self._send(step[1], step[2], step[3] if len(step) > 3 else ())
                    if server.delay:
                        time.sleep(server.delay)
                    if self.path != "/v1/chat/completions":
                        return self._send(404, {"error": {"message": "not found"}})
                    answer = server.completion(body)
                    answered()
                    self._send(200, answer)
                finally:
                    answered()

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def completion(self, body: dict) -> dict:
        content = body["messages"][-1]["content"]
        prompt = content[-1]["text"]
        part = content[0]
        # a video/jpeg data URL is base64 frames joined by commas: its first frame decides
        first = part["image_url"]["url"] if part["type"] == "image_url" else part["video_url"]["url"]
        image = decode_png(base64.b64decode(first.split(",")[1]))
        p = expected_p(float(image.mean()), prompt)
        if self.reply == "no_answer":
            top = [{"token": "Maybe", "logprob": 0.0}]
        else:
            top = [
                {"token": "Yes", "logprob": math.log(0.9 * p * 0.7)},
                {"token": " yes", "logprob": math.log(0.9 * p * 0.3)},
                {"token": "No", "logprob": math.log(0.9 * (1 - p))},
                {"token": "Maybe", "logprob": math.log(0.1)},
            ]
        logprobs = {"content": [{"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top}]}
        if self.reply == "no_logprobs":
            logprobs = None
        elif self.reply == "token_only":
            logprobs = {"content": [{"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": []}]}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": top[0]["token"]},
                    "logprobs": logprobs,
                    "finish_reason": "length",
                }
            ],
        }

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
