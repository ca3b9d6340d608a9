"""CUDA-graph capture that Python's garbage collector cannot invalidate (docs/contract.md s9).

``torch.cuda.graph`` captures in CUDA's *global* mode: any CUDA call the process makes that
is not permitted while a stream is capturing (creating or destroying a graph, a module, a
blocking copy...) invalidates the capture in progress, and the next launch on the stream
fails with ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``. Python's cyclic garbage collector runs
at arbitrary allocations and finalizes whatever became unreachable earlier: a
``torch.cuda.CUDAGraph`` kept alive only by a reference cycle (for example one captured
inside a ``pytest.raises`` block, which the exception's traceback holds through its frame)
is destroyed at that moment, inside an unrelated capture. PyTorch collects garbage before a
capture only when ``torch.compiler.config.force_cudagraph_gc`` is set.

We met this as an intermittent failure of a layer capture in the full single-GPU suite
(docs/qualification, digest ``e9777bf96ed2``: "operation not permitted when stream is
capturing (function reset)", then the invalidated capture). ``capture`` closes the window:
it collects garbage first and keeps the automatic collector off while capturing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["capture"]


@contextmanager
def capture(graph: torch.cuda.CUDAGraph, **graph_kwargs: Any) -> Iterator[None]:
    """``with capture(graph): ...`` is ``with torch.cuda.graph(graph, **graph_kwargs): ...``
    with ``gc.collect()`` before the capture begins and Python's automatic garbage
    collection disabled until it ends (restored as it was, also when the block raises).
    Explicit ``gc.collect()`` calls inside the block still run: do not make them."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with torch.cuda.graph(graph, **graph_kwargs):
            yield
    finally:
        if was_enabled:
            gc.enable()
