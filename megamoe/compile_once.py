"""Kernels compile once per key, never while a CUDA graph is being captured (docs/contract.md
s9): a miss during capture raises ``CompileDuringCaptureError`` naming the kernel and the
warmup to call first. One definition for every launcher module (the staging kernels keep
their own cache, ``megamoe.staging.compile_cache``, which also shares code across H)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping
from typing import TypeVar

import torch

from megamoe.errors import CompileDuringCaptureError

T = TypeVar("T")

__all__ = ["CompileDuringCaptureError", "capturing", "compile_once"]


def capturing(device: torch.device) -> bool:
    """Whether the current stream of a CUDA ``device`` is capturing a graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def compile_once(cache: MutableMapping[Hashable, T], key: Hashable, build: Callable[[], T], *,
                 what: str, warmup: str, device: torch.device | None = None) -> T:
    """``cache[key]``, built by ``build()`` on a miss (inside ``torch.cuda.device(device)``
    when given). A miss while the current stream captures raises
    ``CompileDuringCaptureError``: "``what`` is not compiled and a CUDA graph is being
    captured: call ``warmup`` before capture"."""
    hit = cache.get(key)
    if hit is not None:
        return hit
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise CompileDuringCaptureError(
            f"{what} is not compiled and a CUDA graph is being captured: call {warmup} before "
            "capture (docs/contract.md s9)")
    if device is not None:
        with torch.cuda.device(device):
            hit = build()
    else:
        hit = build()
    cache[key] = hit
    return hit
