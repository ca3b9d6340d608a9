"""Three lookups of the CuTe DSL's trace, each made once per distinct input (issue 40 item 11).

A kernel's trace (the DSL running its Python to build MLIR) is most of its compile, and most
of ``single``'s test time is compiles (docs/engineering-notes.md "Qualification time"). Three
lookups in it are pure functions that the DSL recomputes on every call:

- **op locations**: its ``dsl_user_op`` wrapper (``cutlass/base_dsl/_mlir_helpers/op.py``)
  calls ``inspect.getframeinfo`` for every op it emits, which finds the source file, reads
  the line and walks the code's position table. The answer is fixed by the file, the code
  object, the instruction offset and the context: the line and column come from the code's
  position table at that offset, the function from the code, the text from that line of that
  file. A trace passes the same call sites again and again (unrolled loops, every tile).
- **a module's imports**: its preprocessor (``DSLPreprocessor._get_module_imports`` in
  ``cutlass/base_dsl/ast_preprocessor.py``) parses the whole source of the kernel's module
  each time it rewrites a function of it, to list the module's imports. The list is fixed by
  the module (its name and file, which resolve relative imports) and its source text.
- **type kinds**: ``_is_integer_like_type`` and ``_is_float_type`` of its ``arith`` dialect
  module try to cast the type to each kind and catch the failures. The answer is fixed by the
  type, and an MLIR type's printed form names it (the form parses back to the same type).

``install`` puts a memo in front of each: the first call with an input asks the DSL, later ones
get the kept answer (a module's imports as a fresh list each time). So a trace builds the same
locations, MLIR, PTX and cubins (``tests/host/test_dsl_memos.py`` compiles kernels with and
without the memos and compares every location and every output byte, and shows a memo with a
wrong key caught by the same comparison), in less time: measured with ``python -m
devtools.compile_split --memos memo|dsl`` (docs/engineering-notes.md "Qualification time").

They rely on DSL internals (module globals and a method), so they install only on DSL
versions they were checked on (``KNOWN_DSL_VERSIONS``) and only where each internal is still
the one they were written for; otherwise the DSL runs as it is. ``$MEGAMOE_DSL_MEMOS`` ``0``
turns them off (to measure without them). This module imports neither pytest nor the DSL;
the test plugin ``tests.harness.dsl_memos_plugin`` installs them in every pytest process.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import types
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.harness.compile_share import dsl_version

MEMOS_ENV = "MEGAMOE_DSL_MEMOS"
"""``0``: leave the DSL's lookups as they are (module docstring)."""
OP_MODULE = "cutlass.base_dsl._mlir_helpers.op"
"""The DSL module whose ``dsl_user_op`` looks up every op's location (its ``inspect``)."""
PREPROCESSOR_MODULE = "cutlass.base_dsl.ast_preprocessor"
"""The DSL module whose ``DSLPreprocessor._get_module_imports`` lists a module's imports."""
ARITH_MODULE = "cutlass._mlir.dialects.arith"
"""The DSL's arith dialect module, with the type-kind predicates ``TYPE_KIND_FUNCTIONS``."""
TYPE_KIND_FUNCTIONS = ("_is_integer_like_type", "_is_float_type")
EVERY_MEMO = ("locations", "imports", *TYPE_KIND_FUNCTIONS)
"""What ``install`` returns when every memo is in place."""
KNOWN_DSL_VERSIONS = ("4.3.5",)
"""The nvidia-cutlass-dsl versions these memos were checked against: ``dsl_user_op`` reads
its module's ``inspect`` for ``currentframe`` and ``getframeinfo`` only; ``exec`` asks
``_get_module_imports(original_function)`` and only reads the list; the type-kind predicates
are called through the arith module's globals."""


def frame_key(frame: types.FrameType, context: int) -> Hashable:
    """What fixes ``inspect.getframeinfo(frame, context)`` (module docstring). The file is
    part of the key because code objects compare by content, not by file."""
    code = frame.f_code
    return (code.co_filename, code, frame.f_lasti, context)


def module_key(module: types.ModuleType) -> Hashable | None:
    """What fixes a module's import list: its name, its file and its source text (None where
    the source cannot be read: the DSL is asked every time, as without the memo)."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    return (module.__name__, getattr(module, "__file__", None), source)


def type_key(mlir_type: Any) -> Hashable:
    """An MLIR type's printed form, which names it (module docstring)."""
    return str(mlir_type)


@dataclass(frozen=True)
class MemoKeys:
    """The key each memo keeps its answers by (the tests plant wrong ones to show that the
    comparisons catch them)."""

    frame: Callable[[types.FrameType, int], Hashable] = frame_key
    module: Callable[[types.ModuleType], Hashable | None] = module_key
    type: Callable[[Any], Hashable] = type_key


class FrameInfoMemo:
    """Stands for the ``inspect`` module inside the DSL's op module: ``currentframe`` as
    ``inspect``'s, ``getframeinfo`` kept by its key."""

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


def _marked(memo: Callable[..., Any], real: Callable[..., Any]) -> Callable[..., Any]:
    memo.__wrapped__ = real  # type: ignore[attr-defined]
    memo.megamoe_memo = True  # type: ignore[attr-defined]
    return memo


def memo_module_imports(real: Callable[..., list],
                        key: Callable[[types.ModuleType], Hashable | None] = module_key,
                        ) -> Callable[..., list]:
    """``DSLPreprocessor._get_module_imports`` kept by ``key`` of the function's module."""
    kept: dict[Hashable, list] = {}

    def get_module_imports(self: Any, decorated_func: Any) -> list:
        module = inspect.getmodule(decorated_func)
        k = None if module is None else key(module)
        if k is None:
            return real(self, decorated_func)
        if k not in kept:
            kept[k] = real(self, decorated_func)
        return list(kept[k])

    return _marked(get_module_imports, real)


def memo_type_kind(real: Callable[[Any], bool],
                   key: Callable[[Any], Hashable] = type_key) -> Callable[[Any], bool]:
    """A type-kind predicate of the arith module kept by ``key`` of the type."""
    kept: dict[Hashable, bool] = {}

    def is_kind(mlir_type: Any) -> bool:
        k = key(mlir_type)
        answer = kept.get(k)
        if answer is None:
            answer = kept[k] = real(mlir_type)
        return answer

    return _marked(is_kind, real)


def memos_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(MEMOS_ENV, "1") != "0"


def memos_in_effect(environ: Mapping[str, str] = os.environ) -> bool:
    """Will the test processes of a run with ``environ`` trace with the memos: wanted, and the
    installed DSL one they were checked on (for the qualification record)."""
    return memos_wanted(environ) and _dsl_version() in KNOWN_DSL_VERSIONS


_dsl_version = functools.cache(dsl_version)
"""The installed DSL's version, read once (``install`` runs at every test's setup)."""


def _is_memo(f: object) -> bool:
    return bool(getattr(f, "megamoe_memo", False))


def install(environ: Mapping[str, str] = os.environ, keys: MemoKeys = MemoKeys(),
            dsl_version: Callable[[], str | None] = _dsl_version) -> tuple[str, ...]:
    """Put the memos in place once the DSL's modules are imported; returns the names of
    those in place (``locations``, ``imports``, and the type-kind predicates). Idempotent:
    a memo already in place stays, with its answers."""
    if not memos_wanted(environ):
        return ()
    op: Any = sys.modules.get(OP_MODULE)
    pre: Any = sys.modules.get(PREPROCESSOR_MODULE)
    arith: Any = sys.modules.get(ARITH_MODULE)
    if op is None and pre is None and arith is None:
        return ()
    if dsl_version() not in KNOWN_DSL_VERSIONS:
        return ()
    placed: list[str] = []
    if op is not None:
        if getattr(op, "inspect", None) is inspect:
            op.inspect = FrameInfoMemo(keys.frame)
        if isinstance(getattr(op, "inspect", None), FrameInfoMemo):
            placed.append("locations")
    preprocessor = getattr(pre, "DSLPreprocessor", None)
    if preprocessor is not None and callable(vars(preprocessor).get("_get_module_imports")):
        real = preprocessor._get_module_imports
        if not _is_memo(real):
            preprocessor._get_module_imports = memo_module_imports(real, keys.module)
        placed.append("imports")
    for name in TYPE_KIND_FUNCTIONS:
        real = getattr(arith, name, None)
        if callable(real):
            if not _is_memo(real):
                setattr(arith, name, memo_type_kind(real, keys.type))
            placed.append(name)
    return tuple(placed)


def uninstall() -> None:
    """Give the DSL its own lookups back (where a memo is in place)."""
    op: Any = sys.modules.get(OP_MODULE)
    if op is not None and isinstance(getattr(op, "inspect", None), FrameInfoMemo):
        op.inspect = inspect
    preprocessor = getattr(sys.modules.get(PREPROCESSOR_MODULE), "DSLPreprocessor", None)
    if preprocessor is not None and _is_memo(vars(preprocessor).get("_get_module_imports")):
        preprocessor._get_module_imports = preprocessor._get_module_imports.__wrapped__
    arith: Any = sys.modules.get(ARITH_MODULE)
    for name in TYPE_KIND_FUNCTIONS:
        f = getattr(arith, name, None)
        if _is_memo(f):
            setattr(arith, name, f.__wrapped__)  # type: ignore[union-attr]
