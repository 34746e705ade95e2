"""A test web server for the browse suite: serves a directory, logs every request (one
path per line) so the suite can prove what reached it, and holds `/hold` until a release
file exists (so the suite can look at the browser while it is certainly running)."""
import http.server
import os
import sys
import time

addr, port, root, log_path, release = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
log = open(log_path, "a", buffering=1)


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **kw):
        super().__init__(*a, directory=root, **kw)

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        log.write(f"{self.command} {self.path}\n")
        if self.path.startswith("/hold"):
            for _ in range(1200):
                if os.path.exists(release):
                    break
                time.sleep(0.05)
            body = b"<html><body><p>held and released</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer((addr, port), Handler).serve_forever()
