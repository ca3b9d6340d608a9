"""Compile cache of the staging kernels (docs/contract.md s9).

Keyed by ``(kernel, format, H, K, id dtype, score dtype, device)``. Filled at warmup;
a miss while a CUDA graph is being captured raises ``CompileDuringCaptureError``
instead of compiling (compilation during capture is an error, docs/contract.md s9).

H and every size are runtime arguments of the kernels, so one compiled object serves
every H: a key that differs from a compiled one only in H reuses it without compiling
(and is then a hit, also during capture).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from megamoe.errors import CompileDuringCaptureError

__all__ = ["CacheKey", "CompileDuringCaptureError", "cached_keys", "clear", "get_compiled"]


class CacheKey(NamedTuple):
    kernel: str
    fmt: str
    hidden_size: int
    top_k: int
    id_dtype: str
    score_dtype: str
    device: str


_CACHE: dict[CacheKey, object] = {}
_COMPILED: dict[CacheKey, object] = {}  # by code identity (H dropped)
COMPILE_COUNT = {"n": 0}


def get_compiled(key: CacheKey, build: Callable[[], object], *, capturing: bool) -> object:
    """The compiled kernel for ``key``; compiles on a miss unless ``capturing``."""
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    identity = key._replace(hidden_size=0)
    same_code = _COMPILED.get(identity)
    if same_code is not None:
        _CACHE[key] = same_code
        return same_code
    if capturing:
        raise CompileDuringCaptureError(
            f"staging kernel {key.kernel} for {key} is not compiled and a CUDA graph is being "
            "captured: call megamoe.staging.warmup(...) with the same workspace, dtypes and "
            "device before capture (docs/contract.md s9)"
        )
    compiled = build()
    COMPILE_COUNT["n"] += 1
    _CACHE[key] = compiled
    _COMPILED[identity] = compiled
    return compiled


def cached_keys() -> list[CacheKey]:
    return list(_CACHE)


def clear() -> None:
    """Forget every compiled kernel (tests)."""
    _CACHE.clear()
    _COMPILED.clear()
