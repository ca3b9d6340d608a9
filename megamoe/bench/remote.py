"""Arms that run in a process of their own (``remote_arm``), timed there, compared here.

Some implementations cannot share a process with ours: FlashInfer's CuTe DSL backends need a
newer CuTe DSL than ours, and one of its sm90 layers beside our layer in one process at the
DeepSeek-like shape once left the GPU machine unanswering. A remote arm builds its workload in
a worker process (``python -m megamoe.bench.remote_worker``, with extra environment such as
another ``PYTHONPATH``) and the benchmark treats it like any arm: the same AB/BA schedule,
one sample at a time. Per sample the measurer here flushes the L2 (cold samples: the cache
belongs to the GPU, not to a process) and runs the rank group's barrier, then the worker
times one execution of its unit with its own clock (CUDA events around its captured graph on
the GPU, the host clock on the CPU) and answers the seconds. Only one process touches the GPU
at a time: each request waits for its answer.

Every request is bounded (``RemoteSpec.timeout_s``): a worker that does not answer in time is
killed (its kernels may spin on flags forever) and the benchmark stops with
``RemoteArmError`` naming the arm, the request and the bound; a worker that dies is reported
with its exit status; a failed pre-timing check is an ``AssertionError`` here, as for a local
arm. Remote arms run one rank (EP1). The worker ends when its workload is released
(``close``), at the latest when this process exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from megamoe.bench.registry import Arm, BuildContext, Case, Workload

DEFAULT_TIMEOUT_S = 900.0
"""A request's bound: the first ``prepare`` of a JIT-built layer compiles it (FlashInfer's cake
took about 145 s on the H200)."""
CLOSE_TIMEOUT_S = 30.0
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
"""The folder holding ``megamoe``: always on the worker's ``PYTHONPATH``."""


class RemoteArmError(RuntimeError):
    """A remote arm's worker failed, died or did not answer in time."""


@dataclass(frozen=True)
class RemoteSpec:
    """Where a remote arm's workload comes from: ``builder`` ``"package.module:attribute"``, a
    ``Builder`` imported in the worker; ``env``: extra environment of the worker (its
    ``PYTHONPATH`` goes before this process's; ``${NAME}`` in a value is this process's
    variable ``NAME``, which must be set when the arm is built); ``timeout_s``: each
    request's bound."""

    builder: str
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        module, _, attr = self.builder.partition(":")
        if not module or not attr:
            raise ValueError(f"builder: expected 'package.module:attribute', got {self.builder!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s: expected > 0, got {self.timeout_s!r}")


_VARIABLE = re.compile(r"\$\{(\w+)\}")


def _expand(name: str, key: str, value: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in os.environ:
            raise ValueError(f"arm {name!r}: its worker's {key} needs ${m.group(1)}, which is "
                             "not set")
        return os.environ[m.group(1)]

    return _VARIABLE.sub(one, value)


def _worker_env(name: str, spec: RemoteSpec) -> dict[str, str]:
    extra = {k: _expand(name, k, v) for k, v in spec.env.items()}
    env = {**os.environ, **extra}
    paths = [extra.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", ""), PACKAGE_ROOT]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


class RemoteWorker:
    """One worker process holding one workload (module docstring)."""

    def __init__(self, name: str, spec: RemoteSpec) -> None:
        self.name, self.spec = name, spec
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "megamoe.bench.remote_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=_worker_env(name, spec))
        self._finalizer = weakref.finalize(self, _kill, self.proc)

    def request(self, op: str, timeout_s: float | None = None, **payload: Any) -> dict[str, Any]:
        """Send ``op`` and wait (bounded) for its answer (module docstring)."""
        bound = self.spec.timeout_s if timeout_s is None else timeout_s
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"op": op, **payload}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(op) from None
        ready, _, _ = select.select([self.proc.stdout], [], [], bound)
        if not ready:
            _kill(self.proc)
            raise RemoteArmError(f"arm {self.name!r}: no answer to {op!r} within {bound:g} s; "
                                 "its worker was killed")
        line = self.proc.stdout.readline()
        if not line:
            raise self._died(op)
        reply = json.loads(line)
        if reply.get("ok"):
            return reply
        if reply.get("kind") == "check":
            raise AssertionError(f"arm {self.name!r}: {reply['error']}")
        raise RemoteArmError(f"arm {self.name!r}: {op!r} failed in its worker: {reply['error']}")

    def _died(self, op: str) -> RemoteArmError:
        code = self.proc.wait(timeout=CLOSE_TIMEOUT_S)
        return RemoteArmError(f"arm {self.name!r}: its worker ended (exit status {code}) "
                              f"during {op!r}")

    def close(self) -> None:
        """End the worker (it releases its graphs first); idempotent."""
        if self.proc.poll() is None:
            with contextlib.suppress(RemoteArmError, AssertionError):
                self.request("close", timeout_s=CLOSE_TIMEOUT_S)
        self._finalizer()


def _kill(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


class RemoteUnit:
    """A prepared remote workload: calling it runs one execution in the worker (synchronous);
    ``time()`` is the worker's own time of one execution."""

    def __init__(self, worker: RemoteWorker) -> None:
        self.worker = worker

    def __call__(self) -> None:
        self.worker.request("run")

    def time(self) -> float:
        return float(self.worker.request("time")["seconds"])


def prepare_remote(worker: RemoteWorker, warmup: int, calls: int, graph: bool) -> RemoteUnit:
    """The measurer's ``prepare`` in the worker: warm up, check (an ``AssertionError`` here when
    it fails), capture ``calls`` calls (``graph``) and run them once."""
    worker.request("prepare", warmup=warmup, calls=calls, graph=graph)
    return RemoteUnit(worker)


def _not_here(name: str):  # type: ignore[no-untyped-def]
    def fn() -> None:
        raise RemoteArmError(f"arm {name!r} runs in its worker; the measurer prepares it there")

    return fn


def remote_arm(name: str, spec: RemoteSpec) -> Arm:
    """An arm whose workload is built, prepared and timed in a worker process (module
    docstring); it declares the work its builder declares there."""

    def build(case: Case, ctx: BuildContext) -> Workload:
        if ctx.world_size != 1:
            raise ValueError(f"arm {name!r}: a remote arm runs one rank (EP1), not "
                             f"{ctx.world_size}")
        worker = RemoteWorker(name, spec)
        info = worker.request("build", builder=spec.builder,
                              case={**{f.name: getattr(case, f.name) for f in fields(case)},
                                    "shape": dict(case.shape)},
                              ctx={"device": str(ctx.device), "rank": ctx.rank,
                                   "world_size": ctx.world_size, "seed": ctx.seed})
        return Workload(_not_here(name), bytes_moved=info["bytes_moved"], flops=info["flops"],
                        bytes_sent=info["bytes_sent"], ceiling=info["ceiling"], remote=worker)

    build.__qualname__ = f"remote_arm[{name}]"
    return Arm(name, build)
