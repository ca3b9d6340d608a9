"""The worker of a remote arm (``megamoe.bench.remote``): ``python -m megamoe.bench.remote_worker``.

Reads one JSON request per line on stdin and answers one JSON line on its original stdout
(anything the arm prints goes to stderr, so it cannot corrupt the answers):

- ``build`` (``builder`` ``"module:attribute"``, ``case``, ``ctx``): import the builder, build
  the workload on a backend of the context's device kind, then call the builder module's
  ``after_build()`` if it has one (a worker builds one workload: the module may drop what it
  shares between builds); answer the work it declares;
- ``prepare`` (``warmup``, ``calls``, ``graph``): warm up, run the check (a failure answers
  ``kind: "check"``), capture the unit and run it once;
- ``run``: one execution of the unit, synchronised; ``time``: one timed execution, answered in
  seconds (CUDA events on the GPU, the host clock on the CPU);
- ``close``: release the backend and exit.

Any other failure answers ``kind: "error"`` with the exception; the coordinator stops there.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any

import torch

from megamoe.bench.device import Backend, Unit, default_backend
from megamoe.bench.registry import BuildContext, Case, Workload


class _State:
    backend: Backend | None = None
    workload: Workload | None = None
    unit: Unit | None = None


def _build(state: _State, req: dict[str, Any]) -> dict[str, Any]:
    module_name, _, attr = req["builder"].partition(":")
    module = importlib.import_module(module_name)
    builder = getattr(module, attr)
    case_args = dict(req["case"])
    case_args["caches"] = tuple(case_args["caches"])
    case = Case(**case_args)
    ctx_args = dict(req["ctx"])
    device = torch.device(ctx_args.pop("device"))
    state.backend = default_backend("cuda" if device.type == "cuda" else "cpu", device.index)
    w = builder(case, BuildContext(device, **ctx_args))
    state.workload = w
    after = getattr(module, "after_build", None)
    if after is not None:
        after()
    return {"bytes_moved": w.bytes_moved, "flops": w.flops, "bytes_sent": w.bytes_sent,
            "ceiling": w.ceiling}


def _need(value: Any, first: str) -> Any:
    if value is None:
        raise RuntimeError(f"request out of order: {first} first")
    return value


def _prepare(state: _State, req: dict[str, Any]) -> dict[str, Any]:
    w, backend = _need(state.workload, "build"), _need(state.backend, "build")
    for _ in range(req["warmup"]):
        w.fn()
    backend.synchronize()
    if w.check is not None:
        w.check()
    state.unit = backend.prepare(w.fn, req["calls"], req["graph"])
    state.unit()
    backend.synchronize()
    return {}


def _run(state: _State, req: dict[str, Any]) -> dict[str, Any]:
    _need(state.unit, "prepare")()
    _need(state.backend, "build").synchronize()
    return {}


def _time(state: _State, req: dict[str, Any]) -> dict[str, Any]:
    return {"seconds": _need(state.backend, "build").time(_need(state.unit, "prepare"))}


def _close(state: _State, req: dict[str, Any]) -> dict[str, Any]:
    if state.backend is not None:
        state.backend.release()
    return {}


OPS = {"build": _build, "prepare": _prepare, "run": _run, "time": _time, "close": _close}


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the arm's prints go to stderr
    sys.stdout = sys.stderr
    state = _State()
    for line in sys.stdin:
        req = json.loads(line)
        op = req.get("op")
        try:
            if op not in OPS:
                raise ValueError(f"op: expected one of {sorted(OPS)}, got {op!r}")
            reply = {"ok": True, **OPS[op](state, req)}
        except AssertionError as e:
            reply = {"ok": False, "kind": "check", "error": str(e) or "check failed"}
        except Exception as e:
            tail = traceback.format_exc(limit=-3)
            reply = {"ok": False, "kind": "error", "error": f"{type(e).__name__}: {e}\n{tail}"}
        answers.write(json.dumps(reply) + "\n")
        if op == "close":
            break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
