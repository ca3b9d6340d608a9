"""``megamoe.compile_once`` (docs/contract.md s9): a kernel compiles once per key, a hit is
served during capture, a miss during capture is refused by name with the warmup to call;
and every launcher module raises the one ``CompileDuringCaptureError``."""

from __future__ import annotations

import pytest
import torch

from megamoe import combine, dispatch, staging
from megamoe.compile_once import compile_once
from megamoe.errors import CompileDuringCaptureError
from megamoe.experts import api as gemm_api


def _capturing(monkeypatch, on: bool) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: on)


def test_a_kernel_compiles_once_and_a_hit_is_served_during_capture(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cache: dict[object, object] = {}
    built: list[int] = []

    def build() -> object:
        built.append(1)
        return object()

    _capturing(monkeypatch, False)
    first = compile_once(cache, "k", build, what="kernel k", warmup="warmup()")
    assert compile_once(cache, "k", build, what="kernel k", warmup="warmup()") is first
    _capturing(monkeypatch, True)
    assert compile_once(cache, "k", build, what="kernel k", warmup="warmup()") is first
    assert built == [1]


def test_a_miss_during_capture_names_the_kernel_and_the_warmup_and_builds_nothing(
        monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cache: dict[object, object] = {}
    built: list[int] = []
    _capturing(monkeypatch, True)
    with pytest.raises(CompileDuringCaptureError, match=r"^peer push \(unit 4\) is not compiled "
                       r"and a CUDA graph is being captured: call megamoe\.comm\.push\.warmup"):
        compile_once(cache, "k", lambda: built.append(1), what="peer push (unit 4)",
                     warmup="megamoe.comm.push.warmup(device)")
    assert built == [] and cache == {}


def test_every_launcher_module_raises_the_one_error_class() -> None:
    """Catching ``megamoe.errors.CompileDuringCaptureError`` catches them all (there were
    three classes of that name: staging's, combine's and dispatch's)."""
    for module in (staging, combine, dispatch, gemm_api):
        assert module.CompileDuringCaptureError is CompileDuringCaptureError
