"""The formats benchmark (issue 2, Performance): a quick smoke run, and the full budget check (slow)."""

from __future__ import annotations

import json

import pytest
import torch

from oracle import bench_formats


def _run(capsys, argv: list[str]) -> tuple[int, dict]:
    threads = torch.get_num_threads()
    try:
        rc = bench_formats.main(argv)
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    return rc, json.loads(out.strip().splitlines()[-1])


def test_bench_script_prints_every_quantizer(capsys) -> None:
    rc, summary = _run(capsys, ["--repeats", "1", "--rows", "8", "--cols", "256"])
    assert rc == 0
    assert set(summary["seconds"]) == {"mxfp8_e4m3_rceil", "mxfp8_e5m2_floor", "nvfp4", "safe_fp8"}
    assert summary["threads"] == 1 and summary["shape"] == [8, 256]


@pytest.mark.slow
def test_4096x7168_quantizes_in_under_5_s_on_one_core(capsys) -> None:
    rc, summary = _run(capsys, ["--repeats", "2"])
    assert rc == 0, summary
    assert all(t < bench_formats.BUDGET_S for t in summary["seconds"].values()), summary
