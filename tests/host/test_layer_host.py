"""The layer API on the host (CONTRACTS.md s1, s2, s5, s6, s8): configuration checks, metadata
checks before any launch, caller tensors untouched, route errors like the oracle's, and the
layer's CPU (Torch) path against the oracle on every row. The GPU kernels: tests/single."""

from __future__ import annotations

import math

import pytest
import torch

from megamoe import ConfigError, RouteError
from megamoe.layer import LAYER_RECIPES, LayerConfig, MoELayer
from megamoe.layer.config import H_MULTIPLE, I_MULTIPLE
from oracle.routing import find_route_violations
from tests.layer_check import compare_rows, layer_routes, layer_weights, oracle_output

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
    ("intermediate_size", INTER + 16), ("recipe", "fp16"), ("recipe", "mxfp8"),
    ("clamp", -1.0), ("clamp", math.inf), ("clamp", "1"), ("late_weighting", 1),
])
def test_config_rejects_bad_fields_by_name(field: str, value: object) -> None:
    kwargs = dict(num_experts=E, top_k=K, hidden_size=H, intermediate_size=INTER, capacity=C)
    kwargs[field] = value
    with pytest.raises(ConfigError, match=f"^{field}: expected") as err:
        LayerConfig(**kwargs)  # type: ignore[arg-type]
    assert err.value.argument == field


def test_config_is_frozen_and_recipes_not_run_are_refused_not_substituted() -> None:
    cfg = LayerConfig(E, K, H, INTER, C)
    with pytest.raises(AttributeError):
        cfg.top_k = 3  # type: ignore[misc]
    assert LAYER_RECIPES == ("bf16",)
    with pytest.raises(ConfigError, match="not implemented on the GPU yet"):
        LayerConfig(E, K, H, INTER, C, recipe="fp8_mxfp4")


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
    assert set(vars(layer.last_paths).values()) == {"torch"}


def test_rows_without_active_slots_are_exactly_zero_with_nan_behind_masks() -> None:
    layer, _, _ = _layer()
    x, ids, w = _routes(4, 6, mask_p=0.0)
    ids[2] = -1
    w[2] = float("nan")
    x[2] = float("nan")  # a row with no active slot: its activations never matter
    out = layer.warmup(x, ids, w)
    assert torch.equal(out[2].view(torch.int16), torch.zeros(H, dtype=torch.int16))
    assert bool(torch.isfinite(out).all())


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
    assert bool((out == 3.0).all())
    for a, b in zip(before, (x, ids, w), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


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
    assert any(f"live row {live}" in p for p in compare_rows(one_row, want, ids, "bf16").problems)
    assert compare_rows(torch.zeros_like(out), want, ids, "bf16").problems  # all-zero fails
    nan_dead = out.clone()
    nan_dead[1, 0] = float("nan")
    assert any("inactive row 1" in p for p in compare_rows(nan_dead, want, ids, "bf16").problems)
    neg_zero = out.clone()
    neg_zero[1] = -0.0
    assert compare_rows(neg_zero, want, ids, "bf16").problems  # -0.0 is not +0.0
    inf_row = out.clone()
    inf_row[live, 3] = float("inf")
    assert any("not finite" in p for p in compare_rows(inf_row, want, ids, "bf16").problems)
