"""Rendering a model's template in a worker process that is killed at the time limit.

A template is a stranger's code. Jinja's sandbox keeps it from Python's
internals and the engines bound the size of each value it builds, but nothing
inside a Python process can stop a render in time: a Jinja ``for`` loop over a
list makes no call for a call-event trace hook to see, and one C-level
operation (``sum`` of lists, ``str.replace``, ``sort``) runs, holding the GIL
and seeing no hook at all, for as long as its arguments allow. So every render of a model's template (the chat and generate prompts,
``create``'s check of a Modelfile TEMPLATE) runs in a worker process:

* time: the caller waits at most the limit (:data:`MAX_RENDER_SECONDS`) for
  the answer, then kills the worker, which is replaced for the next render; a
  worker also arms an alarm that ends it should its caller be gone;
* memory: a worker's address space is limited to :data:`MAX_RENDER_MEMORY`
  beyond what it holds when it starts; a render that needs more fails, naming
  the limit, and its worker is replaced;
* concurrency: up to :data:`MAX_WORKERS` renders run at once, one a worker,
  with a spare worker started ahead of need, and waiting for one never holds
  the daemon's event loop (the callers render in threads).

Workers are started once (a Python running :func:`serve`) and kept:
a render costs a round trip through a pipe, not a process start. Frames are
length-prefixed: a request is pickled (the worker trusts its caller; pickle
is several times faster than JSON for a long chat), an answer is the result's
UTF-8 text or a JSON error, so nothing a worker sends back is ever unpickled.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from localllm.config import CHILD_CWD
from localllm.templates.gotemplate import TemplateError

MAX_RENDER_SECONDS = 5.0
MAX_RENDER_MEMORY = 1 << 30  # bytes of address space a render may take beyond the worker's own
MAX_WORKERS = 4
_START_SECONDS = 60.0  # starting Python and Jinja is not the template's time
_ALARM_GRACE_SECONDS = 2.0  # a worker ends itself this long after the limit, should no one kill it
_HEADER = struct.Struct("<Q")
_READY = b"ready"
_RESULT = b"="  # an answer that starts so is the result's text; any other is a JSON error
_MEMORY = b'{"error": "memory"}'


class _WorkerGone(Exception):
    """The worker's process ended, or its pipe broke, before it answered."""


def call_bounded(function: Callable[..., Any], kwargs: dict[str, Any],
                 seconds: float = MAX_RENDER_SECONDS) -> str:
    """``function(**kwargs)`` run in a render worker within ``seconds`` and the memory limit.

    ``function`` must be a module-level function of :mod:`localllm.templates`
    that returns a string. Its TemplateError (or other ValueError of ours, such
    as PromptError) is raised here as it was raised there; a render past either
    limit is a TemplateError naming the limit.
    """
    request = pickle.dumps({"function": f"{function.__module__}:{function.__qualname__}", "kwargs": kwargs,
                            "alarm": seconds + _ALARM_GRACE_SECONDS}, pickle.HIGHEST_PROTOCOL)
    return _answer(_pool().call(request, seconds))


def prestart() -> None:
    """Start a worker now, in the background, so the first render does not wait for one to start."""
    _pool().start_spare()


def _answer(frame: bytes) -> str:
    """The result a worker sent, or its error raised."""
    if frame.startswith(_RESULT):
        return str(memoryview(frame)[len(_RESULT):], "utf-8", "surrogatepass")
    reply = json.loads(frame)
    error = reply["error"]
    if error == "memory":
        raise TemplateError(f"rendering needed more than {MAX_RENDER_MEMORY >> 20} MiB of memory "
                            "(the memory limit of a template's render)")
    if error == "template":
        raise TemplateError(reply["message"], line=reply["line"], column=reply["column"])
    if error == "value":
        raise _our_value_error(reply["type"])(reply["message"])
    raise TemplateError(f"rendering failed: {reply['message']}")


def _our_value_error(qualified: str) -> type[ValueError]:
    module, _, name = qualified.partition(":")
    cls = getattr(importlib.import_module(module), name) if module.startswith("localllm.") else None
    return cls if isinstance(cls, type) and issubclass(cls, ValueError) else ValueError


# ----------------------------------------------------------------------------- the daemon's side


class _Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [CHILD_CWD, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-c", f"from {__name__} import serve; serve()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=CHILD_CWD)
        try:
            if _read_frame(self.process.stdout.fileno(), time.monotonic() + _START_SECONDS) != _READY:
                raise _WorkerGone
        except (_WorkerGone, TimeoutError):
            self.kill()
            raise TemplateError("the template render process did not start") from None

    def call(self, request: bytes, seconds: float) -> bytes:
        """The worker's answer to ``request``; TimeoutError past ``seconds``, _WorkerGone if it ended."""
        deadline = time.monotonic() + seconds
        try:
            self.process.stdin.write(_HEADER.pack(len(request)) + request)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerGone from None
        return _read_frame(self.process.stdout.fileno(), deadline)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:  # a write the kill interrupted
                pass

    def ended_by(self) -> str:
        """How a worker whose pipe closed ended (it may take a moment to finish exiting)."""
        try:
            code = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "it closed its pipe"
        return f"signal {-code}" if code < 0 else f"exit status {code}"


class _Pool:
    """Up to ``size`` workers, one render at a time on each, with a spare started ahead of need
    (a start takes a Python and Jinja import: a fraction of a second, seconds on a busy machine)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._slots = threading.BoundedSemaphore(size)
        self._changed = threading.Condition()
        self._idle: list[_Worker] = []
        self._live = 0  # workers running or starting
        self._starting_spares = 0

    def call(self, request: bytes, seconds: float) -> bytes:
        """A free worker's answer to ``request`` within ``seconds``. The wait for a free worker is held to
        ``seconds`` too, so a burst of slow templates holds other renders up for no longer than one limit."""
        if not self._slots.acquire(timeout=seconds):
            raise TemplateError(f"no render process came free within {seconds:g} s (all {self._size} are "
                                "rendering; the time limit of a template's render)")
        try:
            return self._render(request, seconds)
        finally:
            self._slots.release()

    def _render(self, request: bytes, seconds: float) -> bytes:
        worker = self._take()
        try:
            reply = worker.call(request, seconds)
        except TimeoutError:
            self._discard(worker)
            raise TemplateError(f"rendering took longer than {seconds:g} s "
                                "(the time limit of a template's render)") from None
        except _WorkerGone:
            ended_by = worker.ended_by()
            self._discard(worker)
            raise TemplateError(f"the template's render process ended ({ended_by})") from None
        except BaseException:
            self._discard(worker)
            raise
        if reply == _MEMORY:  # a process that ran out of memory may be left broken
            self._discard(worker)
        else:
            with self._changed:
                self._idle.append(worker)
                self._changed.notify_all()
        return reply

    def start_spare(self) -> None:
        """Start a worker in the background, unless one is idle or starting, or the pool is full."""
        with self._changed:
            if self._idle or self._starting_spares or self._live >= self._size:
                return
            self._starting_spares += 1
            self._live += 1
        threading.Thread(target=self._start_spare, name="render-worker-start", daemon=True).start()

    def _start_spare(self) -> None:
        try:
            worker: _Worker | None = _Worker()
        except TemplateError:  # the next render starts its own, and says why it cannot
            worker = None
        with self._changed:
            self._starting_spares -= 1
            if worker is None:
                self._live -= 1
            else:
                self._idle.append(worker)
            self._changed.notify_all()

    def _take(self) -> _Worker:
        """An idle worker, else the spare being started, else a new one; then a spare for the next caller."""
        with self._changed:
            while not self._idle and self._starting_spares:
                self._changed.wait()
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self._live += 1
        if worker is None:
            try:
                worker = _Worker()
            except TemplateError:
                with self._changed:
                    self._live -= 1
                raise
        elif not worker.alive:  # ended while idle (the OOM killer, say)
            self._discard(worker)
            return self._take()
        self.start_spare()
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._changed:
            self._live -= 1
        self.start_spare()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _Pool(MAX_WORKERS)
        return _POOL


def _read_frame(fd: int, deadline: float) -> bytes:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    return _read_exactly(fd, size, deadline)


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    readable = select.poll()  # not select.select: a daemon's descriptors may pass FD_SETSIZE
    readable.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    while size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not readable.poll(remaining * 1000):
            raise TimeoutError
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise _WorkerGone
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


# ----------------------------------------------------------------------------- the worker's side


def _limit_memory() -> None:
    """Address space: what the worker holds now plus MAX_RENDER_MEMORY (where the system can limit it)."""
    try:
        import resource

        with open("/proc/self/statm") as f:
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError):
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = held + MAX_RENDER_MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))


def _run(request: dict[str, Any]) -> bytes:
    module, _, name = request["function"].partition(":")
    if not module.startswith("localllm.templates."):
        return _error(error="other", message=f"{request['function']} is not a template function")
    function = getattr(importlib.import_module(module), name)
    try:
        return _RESULT + function(**request["kwargs"]).encode("utf-8", "surrogatepass")
    except MemoryError:
        return _MEMORY
    except TemplateError as exc:
        return _error(error="template", message=exc.detail, line=exc.line, column=exc.column)
    except ValueError as exc:
        cls = type(exc)
        return _error(error="value", type=f"{cls.__module__}:{cls.__qualname__}", message=str(exc))


def _error(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def serve() -> None:
    """A worker's life: answer requests from stdin until it closes; the protocol has stdout to itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the daemon, which closes our stdin
    requests = os.fdopen(0, "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into a frame
    _limit_memory()
    try:
        answers.write(_HEADER.pack(len(_READY)) + _READY)
        answers.flush()
        while header := requests.read(_HEADER.size):
            (size,) = _HEADER.unpack(header)
            request = pickle.loads(requests.read(size))
            signal.setitimer(signal.ITIMER_REAL, request["alarm"])  # SIGALRM's default action ends the process
            try:
                reply = _run(request)
            except MemoryError:
                reply = _MEMORY
            signal.setitimer(signal.ITIMER_REAL, 0)
            answers.write(_HEADER.pack(len(reply)) + reply)
            answers.flush()
    except BrokenPipeError:  # the caller is gone
        pass

