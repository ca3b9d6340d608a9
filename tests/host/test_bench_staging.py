"""The ``staging`` benchmark's builders on the CPU (the Torch arm and the copy arm): each
arm's untimed check compares the workspace bytewise with the oracle, and fails on a
planted staging bug, so a wrong kernel is never timed (issue 6, DESIGN.md "Measuring")."""

from __future__ import annotations

import pytest
import torch

import megamoe.staging.torch_path as tp
from megamoe.bench.benchmarks import staging as sb
from megamoe.bench.registry import BuildContext, Case

CTX = BuildContext(torch.device("cpu"), 0, 1, seed=11)


def _case(fmt: str, t: int = 5) -> Case:
    return Case(f"{fmt}-test", {"tokens": t, "hidden": 128, "top_k": 4}, scenario=fmt, seed=11)


@pytest.mark.parametrize("fmt", [f.name for f in sb.FORMATS])
def test_torch_arm_stages_what_the_oracle_stages(fmt: str) -> None:
    work = sb._stage_arm("torch")(_case(fmt), CTX)
    work.fn()
    work.check()  # raises on any byte that differs from the oracle
    assert work.ceiling == "copy_bw" and work.bytes_moved > 0


def test_copy_arm_moves_the_bytes_staging_reads() -> None:
    case = _case("bf16")
    stage_work = sb._stage_arm("torch")(case, CTX)
    copy_work = sb.build_copy_same_bytes(case, CTX)
    # bf16: read T*H*2 + ids + scores; staging writes the same plus int32 ids (narrower)
    t, h, k = 5, 128, 4
    read = t * h * 2 + t * k * 8 + t * k * 4
    assert copy_work.bytes_moved == 2 * read
    assert stage_work.bytes_moved == read + t * h * 2 + t * k * 4 + t * k * 4


def test_check_catches_a_planted_quantization_bug(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(tp, "ceil_log2_bits", lambda d: tp.floor_log2_bits(d) + 1)
    case = _case("mxfp8", t=64)
    work = sb._stage_arm("torch")(case, CTX)
    work.fn()
    with pytest.raises(AssertionError, match="differs from the oracle"):
        work.check()


def test_check_catches_a_stale_route(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    work = sb._stage_arm("torch")(_case("bf16"), CTX)
    work.fn()
    real = tp.stage_routes_into

    def broken(ids, weights, **kw):  # type: ignore[no-untyped-def]
        real(ids, weights, **kw)
        kw["out_ids"][0, 0] = 3 - int(kw["out_ids"][0, 0])

    monkeypatch.setattr(tp, "stage_routes_into", broken)
    work.fn()
    with pytest.raises(AssertionError, match="ids differs"):
        work.check()
