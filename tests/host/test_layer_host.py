"""The layer API on the host (docs/contract.md s1, s2, s5, s6, s8): configuration checks, metadata
checks before any launch, caller tensors untouched, route errors like the oracle's, and the
layer's CPU (Torch) path against the oracle on every row. The GPU kernels: tests/single."""

from __future__ import annotations

import math

import pytest
import torch

from megamoe import ConfigError, RouteError
from megamoe.experts import api as gemm_api
from megamoe.experts.grouped_gemm_kernel import NARROW_ROUTES, default_config
from megamoe.experts.mxfp4 import Mxfp4Matrix
from megamoe.layer import LAYER_RECIPES, LayerConfig, MoELayer
from megamoe.layer.config import H_MULTIPLE, I_MULTIPLE, KNOWN_RECIPES
from oracle.routing import find_route_violations
from tests.layer_check import compare_rows, layer_routes, layer_weights, oracle_output
from tests.weighting_check import WeightingStages, stages_after_forward, weighting_problems
from tests.workspace_guards import fill_workspace_guards, guard_problems

E, K, H, INTER, C = 8, 2, 2 * H_MULTIPLE, I_MULTIPLE, 16


def _weights(seed: int, e: int = E, h: int = H, i: int = INTER):
    return layer_weights(seed, e, h, i)


def _routes(seed: int, t: int, e: int = E, k: int = K, mask_p: float = 0.25):
    return layer_routes(seed, t, num_experts=e, top_k=k, hidden=H, mask_p=mask_p)


def _layer(cfg: LayerConfig | None = None, seed: int = 0):
    cfg = cfg or LayerConfig(E, K, H, INTER, C)
    w13, w2 = _weights(seed, cfg.num_experts, cfg.hidden_size, cfg.intermediate_size)
    return MoELayer(cfg, w13, w2, "cpu"), w13, w2


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize(("field", "value"), [
    ("num_experts", 0), ("top_k", 0), ("hidden_size", -1), ("intermediate_size", 1.5),
    ("capacity", True), ("top_k", E + 1), ("hidden_size", H + 32),
    ("intermediate_size", INTER + 16), ("recipe", "fp16"),
    ("mxfp8_elem", "e3m4"), ("mxfp8_mode", "ceil"), ("nvfp4_input_scale", 0.0),
    ("nvfp4_a2_scale", float("nan")),
    ("clamp", -1.0), ("clamp", math.inf), ("clamp", "1"), ("late_weighting", 1),
])
def test_config_rejects_bad_fields_by_name(field: str, value: object) -> None:
    kwargs = dict(num_experts=E, top_k=K, hidden_size=H, intermediate_size=INTER, capacity=C)
    kwargs[field] = value
    with pytest.raises(ConfigError, match=f"^{field}: expected") as err:
        LayerConfig(**kwargs)  # type: ignore[arg-type]
    assert err.value.argument == field


def test_config_is_frozen_and_runs_every_recipe_of_the_contract() -> None:
    cfg = LayerConfig(E, K, H, INTER, C)
    with pytest.raises(AttributeError):
        cfg.top_k = 3  # type: ignore[misc]
    assert set(LAYER_RECIPES) == set(KNOWN_RECIPES) == {"bf16", "mxfp8", "nvfp4", "fp8_mxfp4"}


@pytest.mark.parametrize(("name", "bad"), [
    ("w13", lambda w13, w2: (w13.float(), w2)),
    ("w13", lambda w13, w2: (w13[:, :-2], w2)),
    ("w2", lambda w13, w2: (w13, w2.transpose(1, 2))),
    ("w2", lambda w13, w2: (w13, "w2")),
])
def test_layer_rejects_bad_weights_by_name(name: str, bad) -> None:  # type: ignore[no-untyped-def]
    w13, w2 = _weights(1)
    with pytest.raises(ConfigError, match=f"^{name}"):
        MoELayer(LayerConfig(E, K, H, INTER, C), *bad(w13, w2), "cpu")


# ---------------------------------------------------------------- against the oracle


@pytest.mark.contract("s5.clamp", "s5.ffn-recipes", "s5.weighting")
@pytest.mark.parametrize(("clamp", "late", "t"), [
    (None, False, C), (0.5, False, 7), (None, True, 11), (0.0, True, 1), (None, False, 0),
])
def test_cpu_layer_meets_the_oracle_on_every_row(clamp, late, t) -> None:  # type: ignore[no-untyped-def]
    cfg = LayerConfig(E, K, H, INTER, C, clamp=clamp, late_weighting=late)
    layer, w13, w2 = _layer(cfg, seed=2)
    x, ids, w = _routes(3, t)
    out = layer.warmup(x, ids, w)
    report = compare_rows(out, oracle_output(cfg, w13, w2, x, ids, w), ids, "bf16")
    assert report.problems == (), report
    assert set(layer.last_paths.values()) == {"torch"}


@pytest.mark.contract("s2.masked-any-score", "s6.inactive-rows-zero")
def test_rows_without_active_slots_are_exactly_zero_with_nan_behind_masks() -> None:
    layer, _, _ = _layer()
    x, ids, w = _routes(4, 6, mask_p=0.0)
    ids[2] = -1
    w[2] = float("nan")
    x[2] = float("nan")  # a row with no active slot: its activations never matter
    out = layer.warmup(x, ids, w)
    assert torch.equal(out[2].view(torch.int16), torch.zeros(H, dtype=torch.int16))
    assert bool(torch.isfinite(out).all())


@pytest.mark.contract("s8.untouched-tail")
def test_live_tokens_leave_rows_past_the_live_count_untouched() -> None:
    layer, w13, w2 = _layer()
    x, ids, w = _routes(5, C)
    layer.warmup(x, ids, w)
    out = torch.full((C, H), 7.0, dtype=torch.bfloat16)
    live = torch.tensor([5], dtype=torch.int32)
    ids_garbage = ids.clone()
    ids_garbage[5:] = 2**40  # rows past the live count are never checked or read
    layer.forward(x, ids_garbage, w, live_tokens=live, out=out)
    assert bool((out[5:] == 7.0).all())
    want = oracle_output(layer.config, w13, w2, x[:5], ids[:5], w[:5])
    assert compare_rows(out[:5], want, ids[:5], "bf16").problems == ()


# ---------------------------------------------------------------- bad input


def _snap(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.clone() for t in ts]


@pytest.mark.contract("s2.metadata-checks")
@pytest.mark.parametrize(("argument", "edit"), [
    ("hidden.dtype", lambda x, i, w, o: (x.float(), i, w, o)),
    ("hidden.shape", lambda x, i, w, o: (x[:, :-8], i, w, o)),
    ("hidden.shape[0]", lambda x, i, w, o: (torch.cat([x, x]), torch.cat([i, i]),
                                            torch.cat([w, w]), o)),
    ("topk_ids.dtype", lambda x, i, w, o: (x, i.to(torch.int16), w, o)),
    ("topk_ids.shape", lambda x, i, w, o: (x, i[:, :1], w, o)),
    ("topk_weights.dtype", lambda x, i, w, o: (x, i, w.to(torch.int32), o)),
    ("topk_weights.shape", lambda x, i, w, o: (x, i, w[:-1], o)),
    ("out", lambda x, i, w, o: (x, i, w, o.float())),
    ("out.shape[0]", lambda x, i, w, o: (x, i, w, o[:-1])),
])
def test_bad_metadata_raises_before_any_work_and_writes_nothing(argument, edit) -> None:  # type: ignore[no-untyped-def]
    layer, _, _ = _layer()
    x, ids, w = _routes(6, 10)
    layer.warmup(x, ids, w)
    out = torch.full((10, H), 3.0, dtype=torch.bfloat16)
    bx, bi, bw, bo = edit(x, ids, w, out)
    before = _snap(bx, bi, bw, bo, layer._terms, layer._a1)
    with pytest.raises(ConfigError, match=f"^{argument.replace('[', '.').replace(']', '.')}"):
        layer.forward(bx, bi, bw, out=bo)
    for a, b in zip(before, (bx, bi, bw, bo, layer._terms, layer._a1), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.contract("s2.active-slot-rules", "s2.route-error-eager")
@pytest.mark.parametrize("kind", ["out_of_range", "duplicate", "nan_score"])
def test_bad_route_values_raise_the_oracles_first_violation_and_write_no_output(kind) -> None:  # type: ignore[no-untyped-def]
    layer, _, _ = _layer()
    x, ids, w = _routes(7, 10, mask_p=0.0)
    layer.warmup(x, ids, w)
    if kind == "out_of_range":
        ids[4, 1] = E
    elif kind == "duplicate":
        ids[6, 1] = ids[6, 0]
    else:
        w[3, 0] = float("nan")
    first = find_route_violations(ids, w, E)[0]
    out = torch.full((10, H), 3.0, dtype=torch.bfloat16)
    before = _snap(x, ids, w)
    with pytest.raises(RouteError) as err:
        layer.forward(x, ids, w, out=out)
    assert (err.value.row, err.value.slot, err.value.rule) == (first.row, first.slot, first.rule)
    layer.check_errors()  # an eager error is reported once, not again by check_errors
    assert bool((out == 3.0).all())
    for a, b in zip(before, (x, ids, w), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.contract("s9.warmup-before-capture")
def test_forward_before_warmup_and_after_destroy_are_errors() -> None:
    layer, _, _ = _layer()
    x, ids, w = _routes(8, 4)
    with pytest.raises(ConfigError, match="warmup"):
        layer.forward(x, ids, w)
    layer.warmup(x, ids, w)
    layer.destroy()
    with pytest.raises(ConfigError, match="destroyed"):
        layer.forward(x, ids, w)
    with pytest.raises(ConfigError, match="destroyed"):
        layer.check_errors()
    layer.destroy()  # idempotent


# ---------------------------------------------------------------- the judge can fail


@pytest.mark.contract("s8.row-tolerance")
def test_compare_rows_catches_planted_output_bugs() -> None:
    layer, w13, w2 = _layer()
    x, ids, w = _routes(9, 12, mask_p=0.2)
    ids[1] = -1
    out = layer.warmup(x, ids, w)
    want = oracle_output(layer.config, w13, w2, x, ids, w)
    assert compare_rows(out, want, ids, "bf16").problems == ()
    live = int((ids != -1).any(dim=1).nonzero()[0])
    one_row = out.clone()
    one_row[live] = (one_row[live].float() * 1.03).bfloat16()  # 3% off on one row
    assert compare_rows(one_row, want, ids, "bf16").failing_rows == (live,)
    assert compare_rows(torch.zeros_like(out), want, ids, "bf16").problems  # all-zero fails
    nan_dead = out.clone()
    nan_dead[1, 0] = float("nan")
    assert compare_rows(nan_dead, want, ids, "bf16").failing_rows == (1,)
    neg_zero = out.clone()
    neg_zero[1] = -0.0
    assert compare_rows(neg_zero, want, ids, "bf16").problems  # -0.0 is not +0.0
    inf_row = out.clone()
    inf_row[live, 3] = float("inf")
    report = compare_rows(inf_row, want, ids, "bf16")
    assert live in report.failing_rows and any("not finite" in p for p in report.problems)


# ---------------------------------------------------------------- fp8_mxfp4 on the CPU path


def _mx_cfg(**kw) -> LayerConfig:  # type: ignore[no-untyped-def]
    return LayerConfig(E, K, H, INTER, C, recipe="fp8_mxfp4", **kw)


@pytest.mark.contract("s5.ffn-recipes", "s5.weighting")
@pytest.mark.parametrize(("clamp", "late", "t"), [(None, False, C), (0.5, True, 7)])
def test_cpu_fp8_mxfp4_layer_meets_the_oracle_from_float_weights(clamp, late, t) -> None:  # type: ignore[no-untyped-def]
    cfg = _mx_cfg(clamp=clamp, late_weighting=late)
    w13, w2 = _weights(12)
    layer = MoELayer(cfg, w13.float(), w2.float(), "cpu")
    x, ids, w = _routes(13, t)
    out = layer.warmup(x, ids, w)
    report = compare_rows(out, oracle_output(cfg, w13.float(), w2.float(), x, ids, w), ids,
                          "fp8_mxfp4")
    assert report.problems == (), report
    assert list(layer.last_paths) == ["stage", "layout", "gather", "fc1", "a2", "fc2",
                                      "scatter", "combine"]


@pytest.mark.contract("s4.mxfp4")
def test_cpu_fp8_mxfp4_layer_takes_prequantized_weights_in_every_accepted_form() -> None:
    from oracle.formats import pad_scale_columns, quantize_mxfp4

    cfg = _mx_cfg()
    w13f, w2f = _weights(14)
    c13, s13 = quantize_mxfp4(w13f)
    c2, s2 = quantize_mxfp4(w2f)
    plain = (Mxfp4Matrix(c13, s13), Mxfp4Matrix(c2, s2))
    typed = (Mxfp4Matrix(c13.view(torch.float4_e2m1fn_x2), s13.view(torch.float8_e8m0fnu)),
             Mxfp4Matrix(c2, pad_scale_columns(s2)))
    x, ids, w = _routes(15, 9)
    want = oracle_output(cfg, *plain, x, ids, w)
    for w13, w2 in (plain, typed):
        out = MoELayer(cfg, w13, w2, "cpu").warmup(x, ids, w)
        assert compare_rows(out, want, ids, "fp8_mxfp4").problems == ()
    # float weights give the same MXFP4 bytes, hence the same output bits
    out_f = MoELayer(cfg, w13f, w2f, "cpu").warmup(x, ids, w)
    out_q = MoELayer(cfg, *plain, "cpu").warmup(x, ids, w)
    assert torch.equal(out_f.view(torch.int16), out_q.view(torch.int16))


@pytest.mark.parametrize(("name", "bad"), [
    ("w13.codes", lambda m13, m2: (Mxfp4Matrix(m13.codes.view(torch.int8), m13.scales), m2)),
    ("w13.codes.shape", lambda m13, m2: (Mxfp4Matrix(m13.codes[:, 1:], m13.scales), m2)),
    ("w2.scales.shape", lambda m13, m2: (m13, Mxfp4Matrix(m2.codes, m2.scales[..., :1]))),
    ("w2.scales", lambda m13, m2: (m13, Mxfp4Matrix(m2.codes, m2.scales.float()))),
    ("w13", lambda m13, m2: (torch.full((E, 2 * INTER, H), float("inf")), m2)),
    ("w2.dtype", lambda m13, m2: (m13, torch.zeros(E, H, INTER, dtype=torch.int32))),
])
def test_fp8_mxfp4_layer_rejects_bad_weights_by_name(name, bad) -> None:  # type: ignore[no-untyped-def]
    from megamoe.experts.mxfp4 import quantize_mxfp4 as mq

    w13f, w2f = _weights(16)
    m13, m2 = mq(w13f), mq(w2f)
    with pytest.raises(ConfigError, match=f"^{name.replace('.', '[.]')}"):
        MoELayer(_mx_cfg(), *bad(m13, m2), "cpu")


@pytest.mark.contract("s4.safe-fp8-row-rule")
def test_cpu_fp8_mxfp4_non_finite_hidden_row_is_a_route_error() -> None:
    cfg = _mx_cfg()
    w13, w2 = _weights(17)
    layer = MoELayer(cfg, w13, w2, "cpu")
    x, ids, w = _routes(18, 8, mask_p=0.0)
    layer.warmup(x, ids, w)
    x[3, 5] = float("nan")
    out = torch.full((8, H), 3.0, dtype=torch.bfloat16)
    with pytest.raises(RouteError, match="non_finite_input"):
        layer.forward(x, ids, w, out=out)
    assert bool((out == 3.0).all())


@pytest.mark.contract("s4.safe-fp8-inactive-row", "s6.inactive-rows-zero")
def test_cpu_fp8_mxfp4_row_that_routes_nowhere_may_be_non_finite() -> None:
    """A NaN/Inf hidden row with every slot masked is never consumed: no error now or at
    ``check_errors``, its output row is ``+0.0`` bytes, and every other row is the same bits
    as with that row finite."""
    cfg = _mx_cfg()
    w13, w2 = _weights(17)
    layer = MoELayer(cfg, w13, w2, "cpu")
    x, ids, w = _routes(18, 8, mask_p=0.0)
    ids[3] = -1
    w[3] = float("nan")
    want = layer.warmup(x, ids, w).clone()
    for junk in (float("nan"), float("inf"), float("-inf")):
        bad = x.clone()
        bad[3, 5] = junk
        got = layer.forward(bad, ids, w)
        layer.check_errors()
        assert bool((got[3].view(torch.int16) == 0).all()), junk
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), junk


@pytest.mark.parametrize("recipe", LAYER_RECIPES)
def test_the_cpu_layers_workspaces_keep_their_guard_bytes(recipe) -> None:
    """Issue 40 item 9: the guard bytes around the staging and layout workspaces' regions
    survive warmup and forwards of changing routes (``tests.workspace_guards``); a byte
    written into a guard is reported with its workspace."""
    layer, _, _ = _layer(LayerConfig(E, K, H, INTER, C, recipe=recipe))
    guards = fill_workspace_guards(layer)
    for i, seed in enumerate((81, 82, 83)):
        x, ids, w = _routes(seed, C - 3 * i, mask_p=0.3)
        (layer.warmup if i == 0 else layer.forward)(x, ids, w)
    assert guard_problems(guards) == []
    stage = layer._stage_ws
    stage.buffer[stage.regions["ids"].offset - 1] = 0  # planted: one byte before a region
    assert guard_problems(guards) == [
        f"staging workspace: 1 guard byte(s) written, first at byte {stage.regions['ids'].offset - 1}"]

# ---------------------------------------------------------------- GEMM variants


def test_the_gemm_variants_come_from_the_route_capacity_never_from_a_batch(monkeypatch):
    h, inter = 512, 256  # N = 512 for both GEMMs: the widest tile (256) is not the narrow one
    small, _, _ = _layer(LayerConfig(E, K, h, inter, NARROW_ROUTES // K))
    big, _, _ = _layer(LayerConfig(E, K, h, inter, NARROW_ROUTES // K + 1))
    assert small.gemm_configs == (default_config(2 * inter, NARROW_ROUTES),
                                  default_config(h, NARROW_ROUTES))
    assert big.gemm_configs == (default_config(2 * inter), default_config(h))
    assert small.gemm_configs[0].tile_n < big.gemm_configs[0].tile_n  # the narrow tile
    # every forward hands the GEMMs exactly those variants, whatever the batch
    passed: list[tuple[str, object]] = []
    real = gemm_api.grouped_gemm

    def spy(*args, **kwargs):
        passed.append((kwargs["mode"], kwargs.get("config")))
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm_api, "grouped_gemm", spy)
    for t in (1, NARROW_ROUTES // K):  # a decode-size batch, then a full one
        passed.clear()
        routes = layer_routes(3 + t, t, num_experts=E, top_k=K, hidden=h, mask_p=0.25)
        (small.warmup if t == 1 else small.forward)(*routes)  # warmup runs a forward too
        assert passed == [("swiglu", small.gemm_configs[0]), ("plain", small.gemm_configs[1])]


@pytest.mark.parametrize(("recipe", "weights"), [("fp8_mxfp4", "mxfp4"), ("nvfp4", "nvfp4")])
def test_the_mx_gemm_variants_get_each_gemms_own_k(recipe: str, weights: str) -> None:
    """FC1 multiplies over H and FC2 over I; the MXFP4 and NVFP4 narrow defaults' pipeline
    depth depends on that K (``mx_default_config``): at H = 7040 (whose rows' scale bytes are
    not whole 16-byte vectors, so the K-long run stays in shared memory) FC1 gets the
    6-stage variant (two CTAs per SM) and FC2, at I = 256, the 4-stage one with four B
    tiles (three). Swapped Ks would swap them."""
    from megamoe.experts.mxfp4_gemm_kernel import mx_default_config

    e, k, h, inter, c = 4, 2, 7040, 256, 64  # c past GEMV_MAX_ROWS: the wgmma variants
    layer, _, _ = _layer(LayerConfig(e, k, h, inter, c, recipe=recipe))
    routes = c * k
    fc1, fc2 = layer.gemm_configs
    assert (fc1.name, fc2.name) == ("m64n64s6wsh", "m64n64s4wsrhb4")
    assert fc1 == mx_default_config(2 * inter, weights, routes, h, e)
    assert fc2 == mx_default_config(h, weights, routes, inter, e)


def tile_heights_at_512_routes(recipe: str) -> dict[int, tuple[int, int]]:
    """FC1's and FC2's tile heights of layers with C = 256 tokens at K = 2 (512 routes)
    over E = 8 and E = 4 experts."""
    heights = {}
    for e in (8, 4):
        layer, _, _ = _layer(LayerConfig(e, 2, H, INTER, 256, recipe=recipe))
        heights[e] = tuple(cfg.tile_m for cfg in layer.gemm_configs)
    return heights


@pytest.mark.parametrize("recipe", ["fp8_mxfp4", "mxfp8", "nvfp4"])
def test_the_layer_passes_its_expert_count_to_the_variant_choice(recipe: str) -> None:
    """The narrow bound is 64 rows per expert (``MX_NARROW_ROWS_PER_EXPERT``): 512 routes
    are 64 rows for each of E = 8 experts (64-row tiles) and 128 for each of E = 4 (128-row
    tiles)."""
    assert tile_heights_at_512_routes(recipe) == {8: (64, 64), 4: (128, 128)}


def test_a_layer_that_drops_its_expert_count_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: the variant choice without the layer's ``E`` (read as one expert) gives
    both layers 128-row tiles, which the test above refuses."""
    real = gemm_api.gemm_config
    monkeypatch.setattr(gemm_api, "gemm_config", lambda weights, n, routes=None, k=None,
                        experts=None, tokens=None: real(weights, n, routes, k, tokens=tokens))
    assert tile_heights_at_512_routes("nvfp4") == {8: (128, 128), 4: (128, 128)}


# ---------------------------------------------------------------- where the score applies

def _stages(recipe: str, late: bool, hidden, ids, w) -> WeightingStages:  # type: ignore[no-untyped-def]
    """A fresh CPU layer's stages after one forward (``tests.weighting_check``)."""
    layer, _, _ = _layer(LayerConfig(E, K, H, INTER, C, recipe=recipe, late_weighting=late))
    return stages_after_forward(layer, hidden, ids, w)


@pytest.mark.contract("s5.weighting")
@pytest.mark.parametrize("recipe", LAYER_RECIPES)
def test_the_cpu_layer_applies_the_score_where_its_flag_says(recipe) -> None:
    """Early against late, told apart for every recipe on the layer's stages (fp8_mxfp4's
    output cannot: its per-row A2 scale absorbs the score, and no output bit moves); and a
    layer that ignores the flag (late stages reported as early) is caught."""
    hidden, ids, w = _routes(71, C, mask_p=0.25)
    early = _stages(recipe, False, hidden, ids, w)
    late = _stages(recipe, True, hidden, ids, w)
    # the live rows and their scores are the caller's active routes and scores, not a buffer
    # the layer could have filled wrongly (zeros would pass the relation)
    active = w[ids >= 0].float().sort().values
    for stages in (early, late):
        assert stages.live == active.numel() > 0
        assert torch.equal(stages.score.sort().values, active)
    assert weighting_problems(recipe, early, late) == []
    assert weighting_problems(recipe, late, late), "a layer ignoring the flag passed"
    assert weighting_problems(recipe, early, early), "a layer always weighting early passed"
