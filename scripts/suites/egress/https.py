"""HTTPS server for the egress suite: serves a directory over TLS (host, port, cert, key, dir)."""
import functools
import http.server
import ssl
import sys

host, port, cert, key, root = sys.argv[1:6]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
httpd = http.server.ThreadingHTTPServer((host, int(port)), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
httpd.serve_forever()
