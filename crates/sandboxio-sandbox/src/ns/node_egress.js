// sandboxio: Node's built-in fetch through the egress proxy. Node before 24 ignores the
// proxy variables for fetch, and this sandbox resolves no names, so fetch would fail. Its
// bundled undici keeps the global dispatcher under a well-known symbol and its Agent takes
// a `connect` hook: the hook below opens a CONNECT tunnel to the proxy (the only way out)
// and, for https, TLS over it, verified against the usual roots plus NODE_EXTRA_CA_CERTS.
// Written into the namespace tier's /etc and loaded through NODE_OPTIONS=--require.
'use strict';
(() => {
  const major = Number(process.versions.node.split('.')[0]);
  const proxy = process.env.HTTPS_PROXY || process.env.https_proxy;
  if (major >= 24 || typeof globalThis.fetch !== 'function' || !proxy) return;
  const key = Symbol.for('undici.globalDispatcher.1');
  const original = globalThis.fetch;
  // Loading undici costs ~30 ms, so nothing happens until the program's first fetch.
  let installed = false;
  globalThis.fetch = function fetch(...args) {
    if (!installed) {
      installed = true;
      install();
    }
    return original.apply(this, args);
  };
  function install() {
    try {
      // Any fetch makes undici create its global dispatcher; a data URL touches no socket.
      original('data:,').catch(() => {});
    } catch {
      return;
    }
    const current = globalThis[key];
    if (!current || typeof current.constructor !== 'function') return;
    const net = require('net');
    const tls = require('tls');
    let target;
    try {
      target = new URL(proxy);
    } catch {
      return;
    }
    const proxyHost = target.hostname;
    const proxyPort = Number(target.port) || 80;
    const connect = (opts, cb) => {
      const https = opts.protocol === 'https:';
      const host = opts.hostname;
      const port = Number(opts.port) || (https ? 443 : 80);
      const authority = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
      const sock = net.connect(proxyPort, proxyHost);
      let done = false;
      const finish = (err, s) => {
        if (done) return;
        done = true;
        if (err) sock.destroy();
        cb(err, s);
      };
      sock.once('error', (e) => finish(e, null));
      sock.once('connect', () => {
        sock.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
      });
      let head = Buffer.alloc(0);
      const onData = (chunk) => {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) {
          if (head.length > 65536) finish(new Error('the egress proxy answered too long a head'), null);
          return;
        }
        sock.removeListener('data', onData);
        const lines = head.subarray(0, end).toString('latin1').split('\r\n');
        if (!/^HTTP\/1\.[01] 200/.test(lines[0])) {
          const body = head.subarray(end + 4).toString('utf8').trim();
          finish(new Error(`the egress proxy refused ${authority}: ${lines[0]}${body ? `: ${body}` : ''}`), null);
          return;
        }
        const rest = head.subarray(end + 4);
        if (rest.length) sock.unshift(rest);
        if (!https) {
          finish(null, sock);
          return;
        }
        const servername = opts.servername || (net.isIP(host) ? undefined : host);
        const t = tls.connect({ socket: sock, servername, ALPNProtocols: ['http/1.1'] });
        t.once('secureConnect', () => finish(null, t));
        t.once('error', (e) => finish(e, null));
      };
      sock.on('data', onData);
    };
    globalThis[key] = new current.constructor({ connect });
  }
})();
