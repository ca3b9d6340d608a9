"""``devtools.standing``: issue 7's goal tables from ``layer`` benchmark records, checked
against hand arithmetic on made-up records of the DeepSeek-like shape (H = 7168, I = 2048,
E = 256, K = 8) with round ceilings (copy 4 TB/s, bf16 320 TFLOP/s, FP8 640 TFLOP/s)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from devtools import standing

H, INTER, E, K = 7168, 2048, 256, 8
HI3 = 3 * H * INTER  # FC1 (2I x H) plus FC2 (H x I) weights of one expert
MXFP4_BYTES = 0.5 + 1 / 32
CEILINGS = [{"name": "copy_bw", "value": 4e12}, {"name": "bf16_mm", "value": 320e12},
            {"name": "fp8_mm", "value": 640e12}]


def _comparison(a: str, b: str, a_s: float, b_s: float, verdict: str) -> dict:
    return {"kind": "ab", "a": a, "b": b,
            "summary": {"median_s": [a_s, b_s], "verdict": verdict}}


def _case(routes: str, tokens: int, times: dict[str, float], verdict: str = "faster") -> dict:
    """One case of a ``layer-fp8-mxfp4`` record: torch against the MXFP4 layer (paired,
    ``verdict``), our bf16 layer against it, each arm achieving its declared work in
    ``times[arm]`` seconds against the case's ceiling (``copy_bw`` up to T = 64, else the
    arm's matmul rate)."""
    shape = {"tokens": tokens, "hidden": H, "inter": INTER, "experts": E, "top_k": K}
    rate = {"torch-grouped-mm": "bf16_mm", "layer-bf16": "bf16_mm", "layer-fp8-mxfp4": "fp8_mm"}
    arms, achieved = {}, []
    for arm, t in times.items():
        ceiling = "copy_bw" if tokens <= 64 else rate[arm]
        work = 1e9
        arms[arm] = {"bytes_moved": work if ceiling == "copy_bw" else 0,
                     "flops": work if ceiling != "copy_bw" else 0, "ceiling": ceiling}
        value = {c["name"]: c["value"] for c in CEILINGS}[ceiling]
        achieved.append({"arm": arm, "ceiling": ceiling, "value": work / t,
                         "ratio": work / t / value})
    return {
        "case": f"deepseek-{routes}-T{tokens}", "shape": shape, "scenario": routes,
        "seed": 17, "arms": arms, "achieved": achieved,
        "comparisons": [
            _comparison("torch-grouped-mm", "layer-fp8-mxfp4", times["torch-grouped-mm"],
                        times["layer-fp8-mxfp4"], verdict),
            _comparison("layer-bf16", "layer-fp8-mxfp4", times["layer-bf16"],
                        times["layer-fp8-mxfp4"], "faster"),
        ],
    }


TIMES = {"torch-grouped-mm": 300e-6, "layer-bf16": 200e-6, "layer-fp8-mxfp4": 150e-6}


def _record(*cases: dict) -> dict:
    return {"ceilings": CEILINGS, "cases": list(cases)}


def test_the_speed_table_is_torchs_median_over_the_arms() -> None:
    got = standing.cells([_record(_case("uniform", 1, TIMES))])
    mx = got[standing.Column("layer-fp8-mxfp4", "deepseek")][("uniform", 1)]
    bf = got[standing.Column("layer-bf16", "deepseek")][("uniform", 1)]
    assert mx.speedup == pytest.approx(300 / 150) and mx.verdict == "faster"
    assert bf.speedup == pytest.approx(300 / 200) and bf.verdict is None  # not paired
    text = standing.render([_record(_case("uniform", 1, TIMES), _case("uniform", 1024, TIMES))])
    assert text.count("bf16 DeepSeek (unpaired)") == 1  # the speed table only
    assert text.count("| case | bf16 DeepSeek | fp8_mxfp4 DeepSeek |") == 2


def test_a_verdict_other_than_faster_is_written_in_bold() -> None:
    text = standing.render([_record(_case("uniform", 4096, TIMES, verdict="noise"))])
    assert "**2.00x noise**" in text
    assert "| uniform T4096 | 1.50x | **2.00x noise** |" in text  # bf16, then fp8_mxfp4


def test_the_floor_table_is_time_over_the_streaming_bound_of_the_touched_experts() -> None:
    """Uniform T = 1 touches 8 experts: MXFP4 streams 8 * 3HI * 0.53125 bytes at 4 TB/s,
    bf16 8 * 3HI * 2; only T <= 16 is in the floor table."""
    got = standing.cells([_record(_case("uniform", 1, TIMES))])
    mx = got[standing.Column("layer-fp8-mxfp4", "deepseek")][("uniform", 1)]
    bf = got[standing.Column("layer-bf16", "deepseek")][("uniform", 1)]
    assert mx.floor_ratio == pytest.approx(150e-6 / (8 * HI3 * MXFP4_BYTES / 4e12))
    assert bf.floor_ratio == pytest.approx(200e-6 / (8 * HI3 * 2 / 4e12))
    text = standing.render([_record(_case("uniform", 1, TIMES), _case("uniform", 64, TIMES))])
    floor = text.split("within 2x")[1].split("at 50 %")[0]
    assert "uniform T1 |" in floor and "uniform T64" not in floor


def test_the_rate_table_is_the_achieved_fraction_and_what_the_roofline_allows() -> None:
    """Uniform T = 1024: 32 rows per expert, 32 FLOP per bf16 weight byte against a ridge of
    320 / 4 = 80 (0.4 attainable); MXFP4 2 * 32 / 0.53125 FLOP per byte against the FP8
    ridge of 160. Only T >= 1024 is in the rate table."""
    got = standing.cells([_record(_case("uniform", 1024, TIMES))])
    mx = got[standing.Column("layer-fp8-mxfp4", "deepseek")][("uniform", 1024)]
    bf = got[standing.Column("layer-bf16", "deepseek")][("uniform", 1024)]
    assert mx.rate == "fp8_mm" and mx.achieved == pytest.approx(1e9 / 150e-6 / 640e12)
    assert mx.attainable == pytest.approx((2 * 32 / MXFP4_BYTES) / 160)
    assert bf.rate == "bf16_mm" and bf.attainable == pytest.approx(32 / 80)
    text = standing.render([_record(_case("uniform", 1024, TIMES), _case("uniform", 256, TIMES))])
    rate = text.split("at 50 %")[1]
    assert f"| uniform T1024 | {100 * bf.achieved:.1f}% of bf16 (40.0%) |" in rate
    assert "uniform T256" not in rate


def test_the_first_record_holding_a_cell_gives_it() -> None:
    """A partial run named first supersedes only its own cells of an older full run."""
    first = _record(_case("uniform", 1, TIMES))
    later = _record(_case("uniform", 1, {**TIMES, "layer-bf16": 100e-6}),
                    _case("skewed", 4, {**TIMES, "layer-bf16": 100e-6}))
    got = standing.cells([first, later])[standing.Column("layer-bf16", "deepseek")]
    assert got[("uniform", 1)].speedup == pytest.approx(1.5)  # the first record's
    assert got[("skewed", 4)].speedup == pytest.approx(3.0)  # only the later one holds it


SPEED_LINE = "| uniform T1 | 1.50x | 2.00x |"
"""Uniform T = 1's speed row, by hand: torch 300 us over bf16 200 us and MXFP4 150 us."""


def test_the_speed_row_reads_as_worked_out_by_hand() -> None:
    assert SPEED_LINE in standing.render([_record(_case("uniform", 1, TIMES))])


def test_a_swapped_ratio_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: the arm's median over torch's (the speedup inverted) reads 0.67x and
    0.50x; the row the test above expects is then not in the table."""
    real = standing._medians
    monkeypatch.setattr(standing, "_medians", lambda record: {
        key: (1 / ratio, verdict) for key, (ratio, verdict) in real(record).items()})
    text = standing.render([_record(_case("uniform", 1, TIMES))])
    assert SPEED_LINE not in text and "| uniform T1 | 0.67x | 0.50x |" in text


def test_records_load_plain_or_gzipped(tmp_path: Path) -> None:
    record = _record(_case("skewed", 16, TIMES))
    plain, packed = tmp_path / "r.json", tmp_path / "r.json.gz"
    plain.write_text(json.dumps(record))
    packed.write_bytes(gzip.compress(json.dumps(record).encode()))
    assert standing.load(plain) == standing.load(packed) == record


def test_case_names_split_into_shape_routes_and_tokens() -> None:
    assert standing.split_case("gptoss-skewed-T1024") == ("gptoss", "skewed", 1024)
    with pytest.raises(ValueError, match="case"):
        standing.split_case("deepseek-T16")
