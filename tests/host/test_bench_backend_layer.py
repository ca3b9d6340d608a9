"""A backend's layer as a benchmark arm (``megamoe.bench.backend_layer``): it meets the oracle
on the CPU for our layer with late weighting, its check catches a backend that applies the
score nowhere, a refusing backend stops the arm with its reason before any weight
is made, an FP8 recipe declares FP8 work, and FlashInfer's layers reach their workers as remote
arms (``layer_flashinfer_cake``, ``layer_flashinfer_fp8``, the latter only with its CuTe DSL's
path set) and are refused there by name on a machine without their GPU."""

from __future__ import annotations

import pytest

from megamoe.bench import backend_layer as bl
from megamoe.bench.benchmarks import layer as lb
from megamoe.bench.benchmarks import layer_flashinfer as lf
from megamoe.bench.device import HostBackend
from megamoe.bench.registry import BuildContext, Case
from megamoe.bench.remote import RemoteArmError
from megamoe.errors import ConfigError

CTX = BuildContext(HostBackend().device, 0, 1, 17)


@pytest.fixture
def tiny(monkeypatch):  # type: ignore[no-untyped-def]
    """A CPU-sized shape under the name ``tiny`` (the builders read the shape from the case)."""
    monkeypatch.setitem(lb.SHAPES, "tiny", lb.Shape("tiny", 128, 64, 8, 2))
    lb._WEIGHTS.clear()
    yield Case("tiny-uniform-T12", {"tokens": 12}, scenario="uniform", seed=17)
    lb._WEIGHTS.clear()


def test_our_layer_behind_the_interface_passes_its_check_with_late_weighting(tiny) -> None:  # type: ignore[no-untyped-def]
    work = bl.MEGAMOE_LATE(tiny, CTX)
    work.check()
    assert work.fn().shape == (12, 128) and work.ceiling == "copy_bw" and work.bytes_moved > 0


def test_our_mxfp8_layer_passes_its_check_and_declares_fp8_weight_bytes(tiny) -> None:  # type: ignore[no-untyped-def]
    work = bl.MEGAMOE_MXFP8(tiny, CTX)
    work.check()
    _, ids, _ = lb._inputs(tiny, CTX)
    touched = int(ids[ids >= 0].unique().numel())
    assert work.ceiling == "copy_bw"
    assert work.bytes_moved == int(touched * 3 * 64 * 128 * (1 + 1 / 32))


def test_the_check_holds_its_reference_rows_not_the_shared_weights(tiny) -> None:  # type: ignore[no-untyped-def]
    """The reference rows are made at build, so that a remote worker can drop the shared
    weights after it (``after_build``): nothing the check closes over shares their storage,
    and it still passes once they are released."""
    import torch

    work = bl.MEGAMOE_LATE(tiny, CTX)
    w13, w2 = lb._weights(lb._shape(tiny), CTX.device)
    shared = {t.untyped_storage().data_ptr() for t in (w13, w2)}
    held = [c.cell_contents for c in work.check.__closure__ or ()]
    assert not any(isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() in shared
                   for v in held)
    del w13, w2
    bl.after_build()
    assert not lb._WEIGHTS
    work.check()


def test_an_unknown_recipe_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="recipe"):
        bl.backend_layer("megamoe", "early", "fp6")


def test_the_check_catches_a_backend_that_never_applies_the_score(tiny) -> None:  # type: ignore[no-untyped-def]
    work = bl.backend_layer("tests.host.backend_doubles:UNWEIGHTED", "late")(tiny, CTX)
    with pytest.raises(AssertionError, match="tiny-uniform-T12"):
        work.check()


def test_a_refusing_backend_stops_the_arm_before_any_weight_is_made(tiny) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="toy builds nothing"):
        bl.backend_layer("tests.host.backend_doubles:TOY", "late")(tiny, CTX)
    assert lb._WEIGHTS == {}


def test_flashinfers_cake_runs_in_a_worker_and_is_refused_there_without_its_gpu() -> None:
    bench = lf.LAYER_FLASHINFER_CAKE
    (arm,) = bench.baselines
    assert arm.name == "flashinfer-sm90-cake" and bench.candidate.build is bl.MEGAMOE_LATE
    shapes = {c.name.split("-")[0]: c.shape["experts"] for c in bench.cases}
    assert shapes == {"deepseek": 256, "dsrank": 32}  # the whole layer, one rank's share at EP8
    with pytest.raises(RemoteArmError, match=r"flashinfer-sm90-cake.*sm_90"):
        arm.build(bench.cases[0], CTX)


def test_flashinfers_fp8_worker_needs_its_cute_dsl_path(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bench = lf.LAYER_FLASHINFER_FP8
    (arm,) = bench.baselines
    assert bench.candidate.build is bl.MEGAMOE_MXFP8 and bench.ceilings == ("copy_bw", "fp8_mm")
    monkeypatch.delenv("MEGAMOE_FLASHINFER_DSL_PATH", raising=False)
    with pytest.raises(ValueError, match="MEGAMOE_FLASHINFER_DSL_PATH"):
        arm.build(bench.cases[0], CTX)
    monkeypatch.setenv("MEGAMOE_FLASHINFER_DSL_PATH", "/nonexistent/dsl-site")
    with pytest.raises(RemoteArmError, match=r"flashinfer-sm90-fp8-pull.*sm_90"):
        arm.build(bench.cases[0], CTX)


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "fp8_block", "fp8_block_fi"])
def test_the_checks_reference_from_the_touched_experts_is_the_whole_weights_reference(
        recipe: str) -> None:
    """``reference_routes`` prepares only the experts the routes touch (a full quantized copy
    of the DeepSeek-like weights does not fit beside the layer's on an H100): its rows equal,
    bit for bit, the oracle's rows from the whole prepared weights, with masked slots, an
    expert touched twice, and routes that touch fewer experts than K (padded with spares)."""
    import torch

    from oracle.experts import moe_forward
    from oracle.moe_config import MoEConfig
    from oracle.weights import prepare_weights

    g = torch.Generator().manual_seed(3)
    e, k, h, i = 8, 4, 128, 128
    cfg = MoEConfig(recipe, e, k, h, i)
    w13 = torch.randn(e, 2 * i, h, generator=g) / 8
    w2 = torch.randn(e, h, i, generator=g) / 8
    x = torch.randn(3, h, generator=g).to(torch.bfloat16)
    ids = torch.tensor([[5, -1, 2, 7], [-1, -1, -1, 5], [2, 5, -1, -1]], dtype=torch.int32)
    scores = torch.rand(3, k, generator=g)
    whole = moe_forward(x, ids, scores, prepare_weights(w13, w2, cfg), cfg)
    got = moe_forward(x, *bl.reference_routes(ids, scores, w13, w2, cfg))
    assert torch.equal(got.view(torch.int16), whole.view(torch.int16))
    few = ids[1:2]  # one expert touched, K = 4: three spares
    sub_ids, _, sub_w, sub_cfg = bl.reference_routes(few, scores[1:2], w13, w2, cfg)
    assert sub_cfg.num_experts == k and sub_w.w13.shape[0] == k
    assert torch.equal(moe_forward(x[1:2], sub_ids, scores[1:2], sub_w, sub_cfg).view(torch.int16),
                       whole[1:2].view(torch.int16))
    # planted: a wrong renumbering (the touched experts in reverse order) gives other rows
    local, _, sub_all, cfg_all = bl.reference_routes(ids, scores, w13, w2, cfg)
    reversed_ids = torch.where(local >= 0, cfg_all.num_experts - 1 - local, local)
    planted = moe_forward(x, reversed_ids, scores, sub_all, cfg_all)
    assert not torch.equal(planted.view(torch.int16), whole.view(torch.int16))
