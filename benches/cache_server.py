#!/usr/bin/env python3
"""Serves a binary cache folder over HTTP/1.1 (keep-alive) on 127.0.0.1 with
a latency added before every answer, as a remote cache would have: the
benchmark of `--coverage` against `nix path-info --store http://...`
(benches/compare.sh, section coverage). Prints the port, then serves until
killed.

    benches/cache_server.py DIR LATENCY_MS
"""
import http.server
import os
import sys
import time


def main():
    root, latency = sys.argv[1], float(sys.argv[2]) / 1000

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, body_wanted):
            time.sleep(latency)
            path = os.path.normpath(os.path.join(root, self.path.lstrip("/").split("?")[0]))
            if not path.startswith(os.path.abspath(root)) or not os.path.isfile(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with open(path, "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body_wanted:
                self.wfile.write(body)

        def do_GET(self):
            self.answer(True)

        def do_HEAD(self):
            self.answer(False)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
