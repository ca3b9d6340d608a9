"""The backend interface (``megamoe.backends``): how the contract suites choose and build the
MegaMoE they judge. Our layer behind it meets the oracle on the CPU; a bug planted behind it
is caught by the scenario library (``oracle.check_kernel``); a name that loads nothing, a
GPU of another architecture, a recipe or feature the backend lacks are refused with a
sentence; the pytest option selects the backend, deselects our internals' tests for a
foreign one and parametrizes the contract tests by its recipes; qualify.py records the
backend, and another backend's records never vouch for our kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megamoe.backends import (
    BackendError,
    BackendInfo,
    LayerSpec,
    MoEBackend,
    MoEHandle,
    as_kernel,
    device_refusal,
    feature_refusal,
    load_backend,
    selected_name,
)
from megamoe.backends.registry import ENV
from megamoe.errors import ConfigError
from oracle.check_kernel import check_kernel
from oracle.moe_config import MoEConfig
from oracle.recipes import RECIPE_NAMES
from oracle.weights import prepare_weights
from tests.harness.ledger import judged_ours
from tests.harness.preflight import check_gpus, check_moe_backend
from tests.layer_check import (
    build_layer,
    compare_rows,
    layer_routes,
    layer_weights,
    oracle_output,
    poison_workspaces,
)

ROOT = Path(__file__).resolve().parents[2]
E, K, H, INTER, C = 8, 2, 128, 64, 16
CPU = torch.device("cpu")
W13, W2 = layer_weights(5, E, H, INTER)
STATES = ("dense-129", "all-masked", "sparse-holes", "asymmetric", "skewed")


def _spec(recipe: str = "bf16", **kw: object) -> LayerSpec:
    return LayerSpec(MoEConfig(recipe, E, K, H, INTER, **kw), C)  # type: ignore[arg-type]


def test_the_default_backend_is_our_layer_and_the_option_or_environment_overrides_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert selected_name() == "megamoe"
    monkeypatch.setenv(ENV, "pkg.mod:OBJ")
    assert selected_name() == "pkg.mod:OBJ"
    assert selected_name("other") == "other"
    ours = load_backend("megamoe")
    assert isinstance(ours, MoEBackend)
    assert ours.info.name == "megamoe" and ours.info.archs == ("sm_90",)
    assert set(ours.info.recipes) == {"bf16", "mxfp8", "nvfp4", "fp8_mxfp4"}


@pytest.mark.parametrize(("name", "message"), [
    ("nope", r"moe backend 'nope': expected one of \['flashinfer-sm90-cake', "
             r"'flashinfer-sm90-fp8-pull', 'megamoe'\] or 'package.module:attribute'"),
    ("no_such_pkg.mod:X", r"cannot import no_such_pkg.mod"),
    ("tests.host.backend_doubles:MISSING", r"has no 'MISSING'"),
    ("tests.host.backend_doubles:NOT_A_BACKEND", r"is not a MoEBackend"),
])
def test_a_name_that_loads_no_backend_is_refused_with_the_reason(name: str, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        load_backend(name)


def test_a_users_backend_loads_by_module_and_attribute() -> None:
    toy = load_backend("tests.host.backend_doubles:TOY")
    assert toy.info.name == "toy" and toy.info.recipes == ("bf16",)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("name", "", "BackendInfo.name"),
    ("features", frozenset({"teleport"}), "BackendInfo.features"),
    ("recipes", (), "BackendInfo.recipes"),
])
def test_backend_info_refuses_bad_fields(field: str, value: object, message: str) -> None:
    kw = {"name": "x", "version": "1", "archs": ("sm_90",), "recipes": ("bf16",)}
    with pytest.raises(ValueError, match=message):
        BackendInfo(**{**kw, field: value})  # type: ignore[arg-type]


def test_layer_spec_refuses_what_is_not_a_contract_config_or_a_capacity() -> None:
    with pytest.raises(ValueError, match=r"LayerSpec\.config"):
        LayerSpec("bf16", C)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"LayerSpec\.capacity"):
        LayerSpec(MoEConfig("bf16", E, K, H, INTER), 0)


def test_a_gpu_of_another_architecture_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/contract.md s11 and issue 39: a backend built for sm_107 on an H200 is refused with
    a clear message, never skipped; so is a CPU device for a backend without CPU support."""
    toy = load_backend("tests.host.backend_doubles:TOY")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    why = device_refusal(toy.info, torch.device("cuda", 0))
    assert why == ("backend toy needs a GPU of architecture sm_100; this device "
                   "(NVIDIA H200) is sm_90")
    assert device_refusal(load_backend("megamoe").info, torch.device("cuda", 0)) is None
    assert device_refusal(toy.info, CPU) == ("backend toy runs on CUDA GPUs only (sm_100), "
                                             "not on the CPU")
    h200 = {"name": "NVIDIA H200", "arch": "sm_90"}
    check = check_gpus("single", [h200], 1, toy.info.archs, "toy")
    assert not check.ok and "needs sm_100 GPUs (backend toy's" in check.detail
    assert check_gpus("single", [h200], 1).ok


def test_our_layer_refuses_what_it_cannot_build_with_the_reason() -> None:
    ours = load_backend("megamoe")
    assert ours.refusal(_spec(), CPU, 1) is None
    odd = LayerSpec(MoEConfig("bf16", E, K, 96, INTER), C)
    assert "hidden_size: expected a multiple of 64" in str(ours.refusal(odd, CPU, 1))
    floor = _spec("fp8_mxfp4", mxfp4_mode="floor")
    assert "MXFP4 weights with mode rceil only, not floor" in str(ours.refusal(floor, CPU, 1))
    assert ours.refusal(_spec(), CPU, 2) is None  # E = 8 over 2 ranks
    assert "E % P == 0: 8 experts over 3 ranks" in str(ours.refusal(_spec(), CPU, 3))


@pytest.mark.parametrize("name", ["megamoe", "flashinfer-sm90-cake"])
def test_build_raises_the_refusal_before_it_builds_anything(name: str) -> None:
    """``build`` of what ``refusal`` names is a ``ConfigError`` carrying that sentence (our
    layer: an H that is no multiple of 64; the FlashInfer adapter: the CPU, before FlashInfer
    is looked for)."""
    backend = load_backend(name)
    spec = LayerSpec(MoEConfig("bf16", E, K, 96, INTER), C) if name == "megamoe" else _spec()
    why = backend.refusal(spec, CPU, 1)
    assert why
    with pytest.raises(ConfigError) as err:
        backend.build(spec, W13, W2, device=CPU)
    assert why in str(err.value)


def test_a_missing_recipe_or_feature_fails_the_test_never_skips_it() -> None:
    toy = load_backend("tests.host.backend_doubles:TOY")
    with pytest.raises(pytest.fail.Exception, match="implements recipes bf16, not mxfp8"):
        build_layer(toy, _spec("mxfp8"), W13, W2, CPU)
    with pytest.raises(pytest.fail.Exception, match="toy builds nothing"):
        build_layer(toy, _spec(), W13, W2, CPU)
    assert feature_refusal(toy.info, "cuda_graphs") is None
    assert feature_refusal(toy.info, "cuda_graphs", "live_tokens", "workspaces") == (
        "backend toy 0.0 does not provide live_tokens, workspaces, which this contract rule "
        "needs")


@pytest.mark.contract("s8.row-tolerance")
@pytest.mark.parametrize("recipe", ["bf16", "fp8_mxfp4", "mxfp8", "nvfp4"])
def test_our_layer_behind_the_interface_meets_the_oracle_on_the_cpu(recipe: str,
                                                                    one_torch_thread) -> None:
    handle = build_layer(load_backend("megamoe"), _spec(recipe), W13, W2, CPU)
    assert isinstance(handle, MoEHandle)
    x, ids, w = layer_routes(7, C, num_experts=E, top_k=K, hidden=H, mask_p=0.3)
    out = handle.warmup(x, ids, w)
    assert set(handle.stages_ran().values()) == {"torch"}  # the CPU paths, every stage
    assert handle.workspaces() and all(isinstance(t, torch.Tensor) for t in handle.workspaces())
    report = compare_rows(out, oracle_output(_spec(recipe), W13, W2, x, ids, w), ids, recipe)
    assert report.problems == (), report
    handle.destroy()


@pytest.mark.contract("s10.single-rank-replay")
@pytest.mark.parametrize("recipe", ["bf16", "fp8_mxfp4", "mxfp8", "nvfp4"])
def test_every_workspace_our_layer_lists_is_rewritten_before_it_is_read(recipe: str,
                                                                        one_torch_thread) -> None:
    """docs/contract.md s10: with NaN (integers: -7) in every region ``workspaces()`` lists
    and in the output between the changing-route states, every live row still meets the
    oracle and equals, bit for bit, a layer that was never poisoned. On the CPU paths; the
    single tier's replay test pours the same poison on the GPU."""
    from fixtures.scenarios import make_sequence

    ours = load_backend("megamoe")
    layer = build_layer(ours, _spec(recipe), W13, W2, CPU)
    clean = build_layer(ours, _spec(recipe), W13, W2, CPU)
    names = []
    for i, state in enumerate(make_sequence(world_size=1, capacity=C, top_k=K, num_experts=E,
                                            hidden_size=H, seed=9)):
        x, ids, w = state.ranks[0].live()
        if i == 0:
            layer.warmup(x, ids, w)
            clean.warmup(x, ids, w)
        out = torch.empty(C, H, dtype=torch.bfloat16)
        poison_workspaces(layer, out)
        got = layer.forward(x, ids, w, out=out)[: x.shape[0]]
        assert torch.equal(got.view(torch.int16), clean.forward(x, ids, w).view(torch.int16)), (
            state.name)
        report = compare_rows(got, oracle_output(_spec(recipe), W13, W2, x, ids, w), ids, recipe)
        assert report.problems == (), (state.name, report)
        names.append(state.name)
    assert len(names) >= 8
    assert len(layer.workspaces()) >= 20  # staging, layout, route tables, GEMM buffers


@pytest.mark.contract("s2.masked-any-score", "s8.invariance")
@pytest.mark.parametrize(("backend", "rule"), [
    ("megamoe", None),
    ("tests.host.backend_doubles:WRAP", "s8.invariance"),
    ("tests.host.backend_doubles:NAN_LEAK", "s8.invariance"),
    ("tests.host.backend_doubles:STALE", "s8.row-tolerance"),
])
def test_the_scenario_library_judges_a_backend_and_catches_a_planted_bug(
        backend: str, rule: str | None, one_torch_thread) -> None:
    """``as_kernel`` hands a built layer to ``oracle.check_kernel``: our layer passes every
    state; the same layer with an id of -1 read as the last expert, with masked slots
    zeroed by multiplying (``0 * NaN``), or with masked slots that add what an earlier state
    left in their cells (the scenario sequence turns active slots masked: ``all-masked`` rows
    stop being ``+0.0``), fails, and the failure names the rule."""
    spec = _spec()
    handle = build_layer(load_backend(backend), spec, W13, W2, CPU)
    report = check_kernel(as_kernel(handle), prepare_weights(W13, W2, spec.config), spec.config,
                          capacity=C, states=STATES)
    if rule is None:
        assert report.ok, report
    else:
        assert not report.ok
        assert rule in {f.rule for f in report.failures}, report


def test_the_row_bits_contract_test_catches_a_masked_slot_that_keeps_an_earlier_term() -> None:
    """The single tier's invariance test, run here on the CPU against our layer (passes) and
    against it with the FP8 pull's finding planted (masked slots sum what an earlier forward
    left in their cells; docs/conformance.md): only the history step catches that one, since
    in every other call of the test row 0's masked slot was never active."""
    from tests.single import test_layer_contract as contract
    from tests.single.layer_cases import C as CONTRACT_C

    contract.test_row_bits_do_not_depend_on_other_rows_masks_or_batch(
        load_backend("megamoe"), CPU, "bf16", CONTRACT_C)
    with pytest.raises(AssertionError, match="its masked slot was active"):
        contract.test_row_bits_do_not_depend_on_other_rows_masks_or_batch(
            load_backend("tests.host.backend_doubles:STALE"), CPU, "bf16", CONTRACT_C)


def test_the_clamp_contract_test_catches_a_gate_clamped_from_below_and_names_the_reading() -> None:
    """The single tier's clamp test on the CPU: our layer passes; a backend whose rows are the
    oracle's with the gate clamped to ``[-c, c]`` fails, and the failure says that its rows
    meet that reading (FlashInfer's cake on the H200, docs/conformance.md)."""
    from tests.single import test_layer_contract as contract

    contract.test_the_clamp_limits_the_gate_from_above_only(load_backend("megamoe"), CPU, "bf16")
    with pytest.raises(AssertionError, match=r"live rows above .* against a gate clamped from "
                                             r"below too: every live row meets it"):
        contract.test_the_clamp_limits_the_gate_from_above_only(
            load_backend("tests.host.backend_doubles:CLAMP_BELOW"), CPU, "bf16")


def test_the_row_bits_contract_test_catches_stale_cells_an_earlier_layer_left() -> None:
    """The same finding with the cells pooled across layers, as FlashInfer pools its workspace
    across layers of one shape (docs/conformance.md: in the H200 run its ``[fp8_block]`` layer
    passed the one-step history right after the ``[fp8_block_fi]`` layer, same kernel and
    inputs, had failed it; with the two steps both fail on an H100, each at the step the pooled
    cells predict): the second layer starts on the term the first one's history step left, so
    its first step adds that same term and shows nothing; the second step, another term,
    catches it. Two backends of one pool, named apart so that the contract tests' layer cache
    builds each its own layer."""
    from tests.host.backend_doubles import PlantedBackend
    from tests.single import test_layer_contract as contract
    from tests.single.layer_cases import C as CONTRACT_C

    pool: dict[str, torch.Tensor] = {}
    names = ("megamoe-planted-stale-pool-first", "megamoe-planted-stale-pool-second")
    try:
        for name, step in zip(names, ("expert 0, score 0.75", "expert 1, score -0.5"), strict=True):
            with pytest.raises(AssertionError, match=f"its masked slot was active \\({step}\\)"):
                contract.test_row_bits_do_not_depend_on_other_rows_masks_or_batch(
                    PlantedBackend("stale", pool=pool, name=name), CPU, "bf16", CONTRACT_C)
    finally:
        for key in [k for k in contract._LAYERS if k[0] in names]:
            del contract._LAYERS[key]


def test_preflight_records_the_backend_or_refuses_a_name_that_loads_nothing() -> None:
    check, entry = check_moe_backend("megamoe")
    assert check.ok and entry["name"] == "megamoe" and entry["archs"] == ["sm_90"]
    check, entry = check_moe_backend("nope")
    assert not check.ok and "expected one of" in check.detail and entry["name"] == "nope"


@pytest.mark.parametrize(("entry", "ours"), [
    (None, True),  # records written before backends existed judged our layer
    ({"name": "megamoe", "version": "0.1.0"}, True),
    ({"name": "flashinfer-sm90-cake", "version": "0.7.2.post1"}, False),
])
def test_only_records_that_judged_our_layer_vouch_for_our_kernels(entry, ours: bool) -> None:
    record = {} if entry is None else {"moe_backend": entry}
    assert judged_ours(record) is ours


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_a_foreign_backend_runs_the_contract_tests_only_with_its_recipes() -> None:
    """``--moe-backend``: the header names the backend; the contract tests are parametrized by
    its recipes (the toy declares bf16 only); our kernels' own tests are deselected."""
    proc = _pytest("--collect-only", "-q", "--moe-backend", "tests.host.backend_doubles:TOY",
                   "tests/single/test_layer.py", "tests/single/test_layer_contract.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids and all("test_layer_contract.py" in i for i in ids)
    tokens = {tok for i in ids if "[" in i for tok in i.split("[")[1].rstrip("]").split("-")}
    assert tokens & set(RECIPE_NAMES) == {"bf16"}, tokens
    assert "deselected" in proc.stdout
    ours = _pytest("--collect-only", "-q", "tests/single/test_layer.py",
                   "tests/single/test_layer_contract.py")
    assert "deselected" not in ours.stdout and "test_layer.py::" in ours.stdout


def test_a_backend_name_that_loads_nothing_fails_the_contract_tests_with_the_reason() -> None:
    proc = _pytest("-q", "--moe-backend", "nope",
                   "tests/single/test_layer_contract.py::"
                   "test_eager_route_error_and_bad_metadata_write_nothing")
    assert proc.returncode == 1, proc.stdout
    assert ("moe backend 'nope': expected one of ['flashinfer-sm90-cake', "
            "'flashinfer-sm90-fp8-pull', 'megamoe']") in proc.stdout
    assert "1 error" in proc.stdout  # the fixture fails: an error, never a skip
    assert "skipped" not in proc.stdout
