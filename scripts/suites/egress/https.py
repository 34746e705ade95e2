"""HTTPS server for the egress suite: serves a directory over TLS (host, port, cert, key, dir).

`/echo-auth` answers with the first 12 hex digits of the SHA-256 of the Authorization
header it received (or `echo-none`), so a test can tell which value reached the upstream
without the value itself appearing anywhere (and short enough not to look like a token to
the redaction). `/echo-auth-raw` answers with the header as it came (an API that echoes
the token it got)."""
import functools
import hashlib
import http.server
import ssl
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/echo-auth-raw"):
            body = ("you-sent " + self.headers.get("Authorization", "nothing") + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/echo-auth"):
            auth = self.headers.get("Authorization")
            if auth is None:
                body = b"echo-none\n"
            else:
                digest = hashlib.sha256(auth.encode()).hexdigest()[:12]
                body = ("echo-digest " + digest + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


host, port, cert, key, root = sys.argv[1:6]
handler = functools.partial(Handler, directory=root)
httpd = http.server.ThreadingHTTPServer((host, int(port)), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
httpd.serve_forever()
