# sandboxio code-context kernel for Python: runs inside the sandbox and keeps one namespace
# between calls. Requests arrive on stdin, one JSON object a line:
#   {"op": "hello", "nonce": "..."}           first, once: the nonce of the frames' mark
#   {"op": "exec", "id": N, "code": "..."}   run a cell
#   {"op": "interrupt"}                       raise KeyboardInterrupt in the running cell
#                                             (a SIGINT to the main thread: it also wakes a
#                                             cell blocked in sleep, a wait or a read)
# Answers leave on stdout as frames: MARK + JSON + newline, where MARK is "\x1eSBXK" + the
# nonce + " ". Anything else on stdout (a subprocess, os.write) is the cell's raw output.
# The requests are read from a private copy of stdin; fd 0 becomes /dev/null, so a cell's
# subprocess neither reads the requests nor learns the nonce. Frames: ready, stdout/stderr (text the cell printed), done (the
# value of the last expression, rich results, the error with its traceback, CPU time).
import ast
import base64
import io
import json
import os
import queue
import resource
import signal
import sys
import threading
import traceback

# Not dumpable: no other process, the cell's own children included, may read this
# process's memory (/proc/<pid>/mem, ptrace), where the nonce and each call's id live.
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except Exception:  # noqa: BLE001 - without ctypes the kernel still runs
    pass

# The requests: a copy of stdin that no child inherits (os.dup makes it non-inheritable).
_in = os.fdopen(os.dup(0), "rb")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
try:
    MARK = "\x1eSBXK" + json.loads(_in.readline())["nonce"] + " "
except (ValueError, KeyError, TypeError):
    sys.exit("sandboxio kernel: the first line on stdin is not its hello")
VALUE_LIMIT = 65536
# The most one call's rich results (images, HTML) may hold, base64 included.
RICH_LIMIT = 8 << 20
MAIN = threading.get_ident()
_out = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace")
_lock = threading.Lock()


def frame(obj):
    with _lock:
        _out.write(MARK + json.dumps(obj) + "\n")
        _out.flush()


class Stream(io.TextIOBase):
    def __init__(self, name):
        self.name = name

    def writable(self):
        return True

    def write(self, s):
        if s:
            frame({"t": self.name, "d": s})
        return len(s)

    def isatty(self):
        return False


sys.stdout = Stream("stdout")
sys.stderr = Stream("stderr")
requests = queue.Queue()
# busy: a cell runs now; pending: cells asked for and not ended (an interrupt that comes
# before its cell started still stops it).
state = {"busy": False, "pending": 0, "stop_next": False}


def reader():
    for line in _in:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("op") == "interrupt":
            if state["busy"]:
                signal.pthread_kill(MAIN, signal.SIGINT)
            elif state["pending"] > 0:
                state["stop_next"] = True
        else:
            state["pending"] += 1
            requests.put(req)
    requests.put(None)


def png(data):
    return {"mime": "image/png", "data": base64.b64encode(data).decode("ascii")}


def bounded(items):
    # Rich results up to RICH_LIMIT in all; each one past it is named, not sent.
    out, size = [], 0
    for r in items:
        n = len(r.get("data", ""))
        if size + n > RICH_LIMIT:
            out.append({"mime": "text/plain",
                        "data": "(%s of %d bytes left out: a call's rich results are at most %d bytes)"
                        % (r.get("mime"), n, RICH_LIMIT)})
            continue
        size += n
        out.append(r)
    return out


def rich_of(v):
    out = []
    try:
        if hasattr(v, "_repr_png_"):
            p = v._repr_png_()
            if isinstance(p, bytes):
                out.append(png(p))
        elif hasattr(v, "savefig"):
            b = io.BytesIO()
            v.savefig(b, format="png")
            out.append(png(b.getvalue()))
        if hasattr(v, "_repr_html_"):
            h = v._repr_html_()
            if isinstance(h, str):
                out.append({"mime": "text/html", "data": h})
    except Exception:
        pass
    return out


def figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    out = []
    for num in plt.get_fignums():
        b = io.BytesIO()
        plt.figure(num).savefig(b, format="png")
        out.append(png(b.getvalue()))
    plt.close("all")
    return out


def cpu_us():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e6)


def run(ns, req):
    t0 = cpu_us()
    value, rich, error = None, [], None
    state["busy"] = True
    try:
        if state["stop_next"]:
            state["stop_next"] = False
            raise KeyboardInterrupt
        tree = ast.parse(req.get("code", ""), "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            v = eval(compile(last, "<cell>", "eval"), ns)
            if v is not None:
                value = repr(v)[:VALUE_LIMIT]
                rich = rich_of(v)
                ns["_"] = v
        rich = bounded(rich + figures())
    except BaseException as e:  # noqa: B902 - a cell's SystemExit or Ctrl-C is its error
        # Without the kernel's own frame: the traceback starts in the cell.
        tb = traceback.format_exception(type(e), e, e.__traceback__.tb_next)
        error = {"ename": type(e).__name__, "evalue": str(e), "traceback": tb}
    finally:
        state["busy"] = False
        state["pending"] -= 1
    frame({"t": "done", "id": req.get("id"), "value": value, "rich": rich,
           "error": error, "cpu_us": cpu_us() - t0})


def main():
    os.environ.setdefault("MPLBACKEND", "Agg")
    # An interrupt is a SIGINT to this thread, whatever the kernel inherited for it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    threading.Thread(target=reader, daemon=True).start()
    frame({"t": "ready", "language": "python", "version": sys.version.split()[0]})
    while True:
        try:
            req = requests.get()
        except KeyboardInterrupt:
            continue
        if req is None:
            return
        try:
            run(ns, req)
        except KeyboardInterrupt:
            frame({"t": "done", "id": req.get("id"), "value": None, "rich": [],
                   "error": {"ename": "KeyboardInterrupt", "evalue": "", "traceback": []},
                   "cpu_us": 0})


main()
