"""``devtools.roofline``: the roofline bound of a ``layer`` benchmark case, checked against
hand arithmetic on the DeepSeek-like shape (H = 7168, I = 2048, E = 256, K = 8)."""

from __future__ import annotations

import pytest

from devtools import roofline

H, INTER, E, K = 7168, 2048, 256, 8
HI3 = 3 * H * INTER  # FC1 (2I x H) plus FC2 (H x I) weights of one expert
MXFP4_BYTES = 0.5 + 1 / 32  # a code nibble plus one E8M0 byte per 32 weights


def _shape(tokens: int) -> dict:
    return {"tokens": tokens, "hidden": H, "inter": INTER, "experts": E, "top_k": K}


@pytest.mark.parametrize(("scenario", "tokens", "routes", "touched"), [
    ("uniform", 1, 8, 8),  # one token: K distinct experts
    ("uniform", 1024, 8192, 256),  # 32 rows for every expert
    ("skewed", 16, 16, 1),  # one active slot per token, all on one expert
])
def test_case_work_counts_the_routes_and_experts_of_the_scenario(scenario, tokens, routes,
                                                                  touched) -> None:
    work = roofline.case_work(_shape(tokens), scenario, seed=17)
    assert work.flops == 2 * routes * HI3
    assert work.weight_elems == touched * HI3


def _record(tokens: int, scenario: str, arms: dict[str, tuple[str, float, float]]) -> dict:
    """A record with round ceilings (copy 4 TB/s, bf16 320 TFLOP/s, FP8 640 TFLOP/s) and one
    case whose arms declare (ceiling, work, achieved value)."""
    return {
        "ceilings": [{"name": "copy_bw", "value": 4e12}, {"name": "bf16_mm", "value": 320e12},
                     {"name": "fp8_mm", "value": 640e12}],
        "cases": [{
            "case": f"deepseek-{scenario}-T{tokens}", "shape": _shape(tokens),
            "scenario": scenario, "seed": 17,
            "arms": {arm: {"bytes_moved": work if c == "copy_bw" else 0,
                           "flops": work if c != "copy_bw" else 0, "ceiling": c}
                     for arm, (c, work, _) in arms.items()},
            "achieved": [{"arm": arm, "ceiling": c, "value": v, "ratio": 0.1}
                         for arm, (c, _, v) in arms.items()],
        }],
    }


def test_uniform_t1024_cannot_reach_half_the_rate_with_bf16_or_mxfp4_weights() -> None:
    """32 rows per expert: 32 FLOP per bf16 weight byte against a ridge of 320 / 4 = 80 ->
    40 %; MXFP4 streams 0.53125 bytes per weight: 2 * 32 / 0.53125 = 120.5 FLOP per byte
    against the FP8 ridge of 160 -> 75.3 %."""
    flops = 2 * 8192 * HI3
    rows = {r.arm: r for r in roofline.bounds(_record(1024, "uniform", {
        "layer-bf16": ("bf16_mm", flops, 100e12),
        "layer-fp8-mxfp4": ("fp8_mm", flops, 50e12),
    }))}
    bf16, mx = rows["layer-bf16"], rows["layer-fp8-mxfp4"]
    assert bf16.attainable == pytest.approx(32 / 80)
    assert mx.attainable == pytest.approx((2 * 32 / MXFP4_BYTES) / 160)
    assert bf16.bound_s == pytest.approx(E * HI3 * 2 / 4e12)  # streaming binds
    assert bf16.seconds == pytest.approx(flops / 100e12)
    assert mx.seconds == pytest.approx(flops / 50e12)


def test_a_floor_case_is_bound_by_its_flops_when_they_take_longer_than_the_stream() -> None:
    """One expert, 64 rows, MXFP4: streaming 3HI * 0.53125 / 4e12 s, the FP8 math
    2 * 64 * 3HI / 640e12 s (longer), so at most stream / math of the floor is attainable;
    bf16 weights stream 4x the bytes and stay bound by the stream."""
    stream_mx = HI3 * MXFP4_BYTES / 4e12
    math_mx = 2 * 64 * HI3 / 640e12
    rows = {r.arm: r for r in roofline.bounds(_record(64, "skewed", {
        "layer-fp8-mxfp4": ("copy_bw", HI3 * MXFP4_BYTES, 1e12),
        "layer-bf16": ("copy_bw", HI3 * 2, 1e12),
    }))}
    assert rows["layer-fp8-mxfp4"].bound_s == pytest.approx(math_mx)
    assert rows["layer-fp8-mxfp4"].attainable == pytest.approx(stream_mx / math_mx)
    assert rows["layer-bf16"].attainable == 1.0
    assert rows["layer-bf16"].bound_s == pytest.approx(HI3 * 2 / 4e12)


def test_every_layer_arm_has_its_weight_bytes_and_rate_and_others_are_refused() -> None:
    assert roofline.arm_math("layer") == (2.0, "bf16_mm")
    assert roofline.arm_math("torch-grouped-mm") == (2.0, "bf16_mm")
    assert roofline.arm_math("layer-fp8-mxfp4") == (MXFP4_BYTES, "fp8_mm")
    assert roofline.arm_math("layer-mxfp8") == (1 + 1 / 32, "fp8_mm")
    assert roofline.arm_math("layer-nvfp4") == (0.5 + 1 / 16, "fp8_mm")  # E4M3 per 16
    with pytest.raises(ValueError, match="arm"):
        roofline.arm_math("copy")


def test_the_side_by_side_arms_are_read_by_their_recipe_and_every_one_is_known() -> None:
    from megamoe.bench.benchmarks import layer_flashinfer as lf

    arms = {a.name for b in (lf.LAYER_FLASHINFER_CAKE, lf.LAYER_FLASHINFER_FP8)
            for a in (b.candidate, *b.baselines)}
    assert arms == set(lf.ARM_RECIPES)
    assert roofline.arm_math("layer-late") == roofline.arm_math("flashinfer-sm90-cake") \
        == (2.0, "bf16_mm")
    assert roofline.arm_math("flashinfer-sm90-fp8-pull") == (1 + 4 / (128 * 128), "fp8_mm")


def test_the_committed_side_by_side_record_is_bound_by_its_weight_stream() -> None:
    """``dsrank-uniform-T16`` (docs/perf.md "Side by side with FlashInfer"): 128 routes over 32
    experts touch all 32, so the bound is their 2.8 GB over ``copy_bw``, and both arms took
    within 6 % of it, warm and cold."""
    import gzip
    import json
    from pathlib import Path

    path = (Path(__file__).resolve().parents[2] / "docs" / "perf" / "records"
            / "layer_flashinfer_cake-dsrank-uniform-f12cb576008f.json.gz")
    record = json.loads(gzip.decompress(path.read_bytes()))
    rows = [r for r in roofline.bounds(record) if r.case == "dsrank-uniform-T16"]
    (bw,) = (c["value"] for c in record["ceilings"] if c["name"] == "copy_bw")
    assert {r.arm for r in rows} == {"layer-late", "flashinfer-sm90-cake"} and len(rows) == 4
    for r in rows:
        assert r.bound_s == pytest.approx(32 * HI3 * 2 / bw, rel=1e-6) and r.attainable == 1.0
        assert 1.0 < r.seconds / r.bound_s < 1.06
