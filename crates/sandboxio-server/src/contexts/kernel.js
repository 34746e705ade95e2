// sandboxio code-context kernel for Node: runs inside the sandbox and keeps one vm context
// between calls (`let x = 1` in one call is `x` in the next). Requests arrive on stdin, one
// JSON object a line: first {"op":"hello","nonce":"..."} (the nonce of the frames' mark,
// never in the environment), then {"op":"exec","id":N,"code":"..."} or {"op":"interrupt"}. A worker
// thread reads them, so an interrupt reaches a busy cell: it raises SIGINT, which the vm
// turns into an error in the cell (breakOnSigint); a cell awaiting a promise is told by a
// message to the main thread, which stops waiting for it. Answers leave on stdout as frames: MARK
// + JSON + newline, MARK = "\x1eSBXK" + the nonce + " ". Anything else on stdout is the
// cell's raw output.
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
const fs = require('fs');

if (!isMainThread) {
  const buf = Buffer.alloc(65536);
  let pending = '';
  const nap = new Int32Array(new SharedArrayBuffer(4));
  // busy[0] is 1 while the main thread runs a cell; busy[1] is the id of the last cell
  // that ended. An interrupt is for the cell running or about to run: a SIGINT is sent
  // while one runs, again until it ends (a signal can be missed), for at most 2 s.
  const busy = new Int32Array(workerData);
  let posted = 0;
  const interrupt = () => {
    let told = false;
    for (let k = 0; k < 40 && Atomics.load(busy, 1) < posted; k++) {
      if (Atomics.load(busy, 0) === 1) process.kill(process.pid, 'SIGINT');
      else if (!told) { parentPort.postMessage({ op: 'interrupt' }); told = true; }
      Atomics.wait(busy, 0, Atomics.load(busy, 0), 50);
    }
  };
  for (;;) {
    let n;
    try {
      n = fs.readSync(0, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code === 'EAGAIN') { Atomics.wait(nap, 0, 0, 20); continue; }
      n = 0;
    }
    if (n === 0) { parentPort.postMessage(null); break; }
    pending += buf.toString('utf8', 0, n);
    let i;
    while ((i = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, i);
      pending = pending.slice(i + 1);
      let req;
      try { req = JSON.parse(line); } catch (_) { continue; }
      if (req.op === 'interrupt') interrupt();
      else if (req.op === 'hello') parentPort.postMessage(req);
      else {
        if (Number.isInteger(req.id)) posted = Math.max(posted, req.id);
        parentPort.postMessage(req);
      }
    }
  }
} else {
  const vm = require('vm');
  const util = require('util');
  // Set by the hello, the first line on stdin; no frame is written before it.
  let MARK = null;
  const VALUE_LIMIT = 65536;
  const frame = (o) => fs.writeSync(1, MARK + JSON.stringify(o) + '\n');
  const say = (t) => (...a) => frame({ t, d: util.format(...a) + '\n' });
  const kconsole = {
    log: say('stdout'), info: say('stdout'), debug: say('stdout'),
    error: say('stderr'), warn: say('stderr'), trace: say('stderr'),
    dir: (o) => frame({ t: 'stdout', d: util.inspect(o) + '\n' }),
  };
  const sandbox = {
    console: kconsole, require, process, Buffer, URL, TextEncoder, TextDecoder,
    setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, queueMicrotask,
  };
  const ctx = vm.createContext(sandbox);
  // Idle, a SIGINT must not end the kernel; during a cell the vm takes it.
  process.on('SIGINT', () => {});
  const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
  const queue = [];
  let running = false;
  let closed = false;
  const errorOf = (e) => {
    if (e instanceof Error || (e && e.stack)) {
      // The kernel's own frames (from the vm call on) are not the cell's.
      const lines = String(e.stack).split('\n');
      const cut = lines.findIndex((l) => /^\s+at .*(node:vm|sigintHandlersWrap)/.test(l));
      const tb = (cut > 0 ? lines.slice(0, cut) : lines).map((l) => l + '\n');
      return { ename: e.name || 'Error', evalue: String(e.message), traceback: tb };
    }
    return { ename: 'Error', evalue: util.inspect(e), traceback: [] };
  };
  // Rejects the promise the running cell is awaiting (an interrupt), while it awaits one.
  let interruptAwait = null;
  const shared = new SharedArrayBuffer(8);
  const busy = new Int32Array(shared);
  const settle = () => { Atomics.store(busy, 0, 0); Atomics.notify(busy, 0); };
  const ended = (id) => {
    if (Number.isInteger(id)) Atomics.store(busy, 1, id);
    Atomics.notify(busy, 0);
  };
  async function run(req) {
    const t0 = cpu();
    let value = null;
    let error = null;
    try {
      Atomics.store(busy, 0, 1);
      let v;
      try {
        v = vm.runInContext(req.code || '', ctx, { filename: '<cell>', breakOnSigint: true });
      } finally {
        settle();
      }
      if (v && typeof v.then === 'function') {
        // Awaited until it settles or an interrupt comes (the promise itself goes on).
        const stop = new Promise((_, reject) => { interruptAwait = reject; });
        try {
          v = await Promise.race([v, stop]);
        } finally {
          interruptAwait = null;
        }
      }
      if (v !== undefined) value = util.inspect(v).slice(0, VALUE_LIMIT);
    } catch (e) {
      error = errorOf(e);
    }
    ended(req.id);
    frame({ t: 'done', id: req.id, value, rich: [], error, cpu_us: cpu() - t0 });
  }
  async function pump() {
    if (running) return;
    running = true;
    while (queue.length) await run(queue.shift());
    running = false;
    if (closed) process.exit(0);
  }
  const w = new Worker(__filename, { workerData: shared });
  w.on('message', (req) => {
    if (req === null) { closed = true; if (!running) process.exit(0); return; }
    if (req.op === 'hello') {
      if (MARK === null && typeof req.nonce === 'string') {
        MARK = '\x1eSBXK' + req.nonce + ' ';
        frame({ t: 'ready', language: 'node', version: process.version });
      }
      return;
    }
    if (MARK === null) return;
    if (req.op === 'interrupt') {
      if (interruptAwait) {
        const e = new Error('Script execution was interrupted while awaiting a promise');
        e.name = 'Interrupted';
        interruptAwait(e);
      }
      return;
    }
    queue.push(req);
    pump();
  });
}
