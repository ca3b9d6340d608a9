"""The CuTe DSL's source locations, looked up once per call site (issue 40 item 11).

Every op the DSL emits carries a source location: its ``dsl_user_op`` wrapper
(``cutlass/base_dsl/_mlir_helpers/op.py``) calls ``inspect.getframeinfo`` on its caller's
frame, which finds the source file, reads the line and walks the code's position table, each
time. A kernel's trace passes the same call sites again and again (unrolled loops, every
tile); one every-row layer test spent 5.9 s of its 28 s there (docs/engineering-notes.md
"Qualification time").

``install`` gives that module an ``inspect`` whose ``getframeinfo`` keeps each answer by
(file, code object, instruction offset, context). Those four fix the answer: the line and
column come from the code's position table at that offset, the function from the code, the
text from that line of that file. So the DSL builds the same locations, hence the same MLIR,
PTX and cubins (``tests/host/test_dsl_locations.py`` compiles kernels both ways and compares
every location and every output byte), in less time: on the CPU, 16 of the compile gate's
kernels traced in 8.0 to 8.5 s instead of 11.8 to 12.7 s
(``python -m devtools.compile_split --count 16 --seed 1 --locations memo``, then
``--locations dsl``). The standard ``getframeinfo`` is kept; only the module's global is
replaced.

It relies on a DSL internal (that module's ``inspect`` global), so it installs only on DSL
versions it was checked on (``KNOWN_DSL_VERSIONS``) and only where the global is still the
standard ``inspect`` module; otherwise the DSL runs as it is. ``$MEGAMOE_DSL_LOCATION_MEMO``
``0`` turns it off (to measure without it). This module imports neither pytest nor the DSL.
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from collections.abc import Callable, Hashable, Mapping
from typing import Any

MEMO_ENV = "MEGAMOE_DSL_LOCATION_MEMO"
"""``0``: leave the DSL's location lookup as it is (module docstring)."""
OP_MODULE = "cutlass.base_dsl._mlir_helpers.op"
"""The DSL module whose ``dsl_user_op`` looks up every op's location."""
KNOWN_DSL_VERSIONS = ("4.3.5",)
"""The nvidia-cutlass-dsl versions whose ``dsl_user_op`` was checked: it reads the module
global ``inspect`` for ``currentframe`` and ``getframeinfo`` and nothing else of it."""


def frame_key(frame: types.FrameType, context: int) -> Hashable:
    """What fixes ``inspect.getframeinfo(frame, context)``: the file, the code object (its
    position table and name), the instruction offset and the context (module docstring).
    The file is part of the key because code objects compare by content, not by file."""
    code = frame.f_code
    return (code.co_filename, code, frame.f_lasti, context)


class FrameInfoMemo:
    """Stands for the ``inspect`` module inside the DSL's op module: ``currentframe`` as
    ``inspect``'s, ``getframeinfo`` kept by ``key`` (``frame_key``; a planted key in the
    tests shows a wrong one is caught)."""

    currentframe = staticmethod(inspect.currentframe)

    def __init__(self, key: Callable[[types.FrameType, int], Hashable] = frame_key) -> None:
        self._key = key
        self._kept: dict[Hashable, inspect.Traceback] = {}
        self.calls = 0

    def getframeinfo(self, frame: types.FrameType, context: int = 1) -> inspect.Traceback:
        self.calls += 1
        key = self._key(frame, context)
        info = self._kept.get(key)
        if info is None:
            info = self._kept[key] = inspect.getframeinfo(frame, context)
        return info

    @property
    def kept(self) -> int:
        """How many distinct call sites it looked up."""
        return len(self._kept)


def memo_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(MEMO_ENV, "1") != "0"


def _dsl_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:
        return None


def install(environ: Mapping[str, str] = os.environ, memo: FrameInfoMemo | None = None,
            dsl_version: Callable[[], str | None] = _dsl_version) -> FrameInfoMemo | None:
    """Put a ``FrameInfoMemo`` (``memo`` or a new one) in the DSL's op module once the DSL is
    imported; returns the one in place, or None where it does not install (module
    docstring). Idempotent."""
    if not memo_wanted(environ):
        return None
    op: Any = sys.modules.get(OP_MODULE)
    if op is None:
        return None
    current = getattr(op, "inspect", None)
    if isinstance(current, FrameInfoMemo):
        return current
    if current is not inspect or dsl_version() not in KNOWN_DSL_VERSIONS:
        return None
    op.inspect = memo if memo is not None else FrameInfoMemo()
    return op.inspect


def uninstall() -> None:
    """Give the DSL's op module the standard ``inspect`` back (where it had a memo)."""
    op: Any = sys.modules.get(OP_MODULE)
    if op is not None and isinstance(getattr(op, "inspect", None), FrameInfoMemo):
        op.inspect = inspect
