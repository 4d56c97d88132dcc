"""A small model server for berth's serving examples, tests and benches: Python's standard
library only, so it runs in berth/python with no download and no GPU.

The model is a nearest-centroid classifier of Fisher's iris flowers (the centroids are the
species' means over the classic data set). It answers:

  GET  /health    200 once loaded (503 for LOAD_SECONDS after the start, 0 by default)
  POST /predict   {"features": [[sepal_length, sepal_width, petal_length, petal_width], ...]}
                  -> {"predictions": [...], "replica": ..., "boot": ...}
  POST /generate  {"prompt": "...", "tokens": N, "delay_ms": D} -> server-sent events, one
                  token each D ms, then `data: [DONE]` (an LLM server's streamed answer)
  GET  /          what it serves

`replica` is the inference session (BERTH_SESSION_ID) and `boot` is fresh at each start, so a
caller can tell replicas, and restarts, apart.
"""

import json
import os
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CENTROIDS = {
    "setosa": (5.006, 3.428, 1.462, 0.246),
    "versicolor": (5.936, 2.770, 4.260, 1.326),
    "virginica": (6.588, 2.974, 5.552, 2.026),
}
PORT = int(os.environ.get("PORT", "8000"))
LOADED_AT = time.monotonic() + float(os.environ.get("LOAD_SECONDS", "0"))
REPLICA = os.environ.get("BERTH_SESSION_ID", "local")
BOOT = uuid.uuid4().hex[:12]


def predict(features):
    def distance(centroid):
        return sum((a - b) ** 2 for a, b in zip(features, centroid))

    return min(CENTROIDS, key=lambda species: distance(CENTROIDS[species]))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are written apart: without this, the body waits for the
    # caller's delayed acknowledgement of the head (40 ms on Linux).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self):
        if self.path == "/health":
            if time.monotonic() < LOADED_AT:
                return self.answer(503, {"status": "loading"})
            return self.answer(200, {"status": "ok", "replica": REPLICA, "boot": BOOT})
        if self.path == "/":
            return self.answer(200, {"model": "iris", "species": sorted(CENTROIDS)})
        self.answer(404, {"error": "not found"})

    def do_POST(self):
        try:
            request = self.body()
        except ValueError:
            return self.answer(400, {"error": "the body is not JSON"})
        if self.path == "/predict":
            rows = request.get("features")
            if not isinstance(rows, list) or not all(
                isinstance(r, list) and len(r) == 4 for r in rows
            ):
                return self.answer(422, {"error": "features: a list of 4-number rows"})
            return self.answer(
                200,
                {
                    "predictions": [predict(r) for r in rows],
                    "replica": REPLICA,
                    "boot": BOOT,
                },
            )
        if self.path == "/generate":
            return self.generate(request)
        self.answer(404, {"error": "not found"})

    def generate(self, request):
        words = (request.get("prompt") or "iris").split() or ["iris"]
        tokens = int(request.get("tokens", 8))
        delay = float(request.get("delay_ms", 50)) / 1000
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(text):
            data = text.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for i in range(tokens):
            token = words[i % len(words)]
            chunk("data: %s\n\n" % json.dumps({"index": i, "token": token}))
            time.sleep(delay)
        chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True
    print(f"iris model serving on :{PORT} (replica {REPLICA}, boot {BOOT})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)
