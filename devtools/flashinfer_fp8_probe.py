"""Why FlashInfer's sm90 FP8 pull misses the oracle (docs/conformance.md, its section): one
layer at E = 8, H = I = 256, K = 2, T = 4, built by our adapter, its rows compared with
FlashInfer's own reference, with the oracle's ``fp8_block`` (docs/contract.md s12) and with the
oracle's ``fp8_block_fi``, FlashInfer's recipe as the oracle carries it (W13 tiles cut after
its 8-row gate/up interleave, A2 in 1 x 64 blocks with payload ``x * (1/d)``); per row,
relative L2.

1. ``dense``: every route active;
2. ``masked (stale)``: the same layer, slots (0, 1) and (2, 0) masked with NaN scores, after
   the dense batch filled their cells;
3. ``masked (as zero routes)``: the same batch with each masked slot sent to an expert its
   row does not use, with score 0 (a term of exactly zero);
4. ``masked (fresh workspace)``: the masked batch on a layer of another capacity, whose
   workspace no earlier launch has written.

Run in FlashInfer's process (its CuTe DSL; the environment ``devtools/flashinfer_device.sh
flashinfer-sm90-fp8-pull`` sets, after its two ``stage-dsl`` calls), from the repository
root: ``python3 -m devtools.flashinfer_fp8_probe``.

On an H100 (2026-12-05, FlashInfer 0.7.2.post1, CuTe DSL 4.7.1), 17 s, with this probe's
first form (its own CPU model of FlashInfer's recipe, written before the oracle carried it;
on the CPU that model gave ``fp8_block_fi``'s bits on these batches): FlashInfer's kernel
meets its reference on every row of 1, 3 and 4 (printed 0.0: below 0.00005) and misses it on
the masked rows of 2 (0.90, 0.23); ``fp8_block`` is 0.05 to 0.07 from the kernel and from
FlashInfer's recipe on every row, the recipe 0.004 to 0.027 from the kernel.

``--cpu`` (any machine with FlashInfer's files: ``$MEGAMOE_FLASHINFER_ROOT`` or
``flashinfer-python``) compares ``fp8_block_fi`` instead with FlashInfer's reference and
weight transform run on the CPU, whose raw FP8 GEMM (``torch._scaled_mm``) is an exact float32
product there. ``--gpu-vs-cpu`` (on the GPU machine, FlashInfer's process) measures what the
GPU adds: FlashInfer's reference on the GPU against itself on the CPU and against
``fp8_block_fi``, and every raw FP8 block product of its GPU run against the exact sum of the
same bytes. On an H200 (2026-12-06): the GPU reference is 0.0265 (T = 4) and 0.0134
(T = 64) from the CPU one in worst-row relative L2, ``fp8_block_fi`` 0.0 and 0.0001 from the
CPU one; 275 182 of the 278 528 raw block products differ from the exact sum, by at most
5.4e-4 of their call's largest magnitude (the FP8 tensor cores' accumulation;
docs/conformance.md). The default mode on the same H200 gave the H100's numbers above, to
their rounding (dense rows 0.0035 to 0.0265 from the recipe, masked rows 0.903 and 0.231).

``--survey`` (FlashInfer's process) and ``--survey-ours`` (ours: the harness's environment,
``.whl``'s prelude on the GPU machine) ask whether our FP8 layer, on the same GPU, stays
closer to its recipe than FlashInfer's pull to its own. Ours implements ``mxfp8`` (E4M3,
1 x 32 power-of-two scales), not ``fp8_block``, so the recipes differ and so does what the
answer can say: the same 15 dense batches (T = 1, 4 and 64, five seeds each, ``SURVEY``)
through each layer, the worst row against the oracle's recipe printed per T. On an H100
(2026-12-06): FlashInfer's pull 0.0436, 0.0265 and 0.0418 from ``fp8_block_fi``; ours 0.0000
from ``mxfp8`` at each T (below 0.00005: our kernels fold the block scales into bf16 operands,
exact, and run bf16 wgmma; docs/conformance.md).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

from megamoe.backends.api import LayerSpec, MoEBackend
from megamoe.backends.flashinfer_sm90 import FP8_PULL
from oracle.moe_config import MoEConfig
from tests.host.test_grouped_gemm_host import row_rel_errors
from tests.layer_check import layer_routes, layer_weights, oracle_output

E, H, INTER, K, T, C = 8, 256, 256, 2, 4, 8
def rel(got: torch.Tensor, want: torch.Tensor) -> list[float]:
    """Relative L2 of each row (docs/contract.md s8; ``row_rel_errors``), to 4 places."""
    return [round(v, 4) for v in row_rel_errors(got.float().cpu(), want.float().cpu()).tolist()]


def recipe(name: str, w13_all: torch.Tensor, w2_all: torch.Tensor, x: torch.Tensor,
           ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The oracle's rows in recipe ``name`` (early weighting, no clamp), on the CPU."""
    spec = LayerSpec(MoEConfig(name, E, K, H, INTER), C)
    return oracle_output(spec, w13_all, w2_all, x.cpu(), ids.cpu(), w.cpu())


@functools.cache
def _load_reference():  # type: ignore[no-untyped-def]
    """FlashInfer's ``moe_ep``, its FP8 weight transform and its reference package, from
    FlashInfer's files (``megamoe.backends.flashinfer_loader``). Where the CuTe DSL is absent
    a stand-in ``cutlass.cutlass_dsl.Float32`` (Python's ``float``) serves the one module that
    imports it for two constants (``megamoe_constants.py``)."""
    import importlib
    import sys
    import types

    from megamoe.backends.flashinfer_loader import load_moe_ep

    try:
        import cutlass  # noqa: F401
    except ImportError:
        dsl = types.ModuleType("cutlass.cutlass_dsl")
        dsl.Float32 = float  # type: ignore[attr-defined]
        stand_in = types.ModuleType("cutlass")
        stand_in.cutlass_dsl = dsl  # type: ignore[attr-defined]
        sys.modules.update({"cutlass": stand_in, "cutlass.cutlass_dsl": dsl})
    ep = load_moe_ep()
    transform = importlib.import_module(
        "flashinfer.moe_ep.backends.mega.kernel.sm90.fp8_fp8_bf16_pull_cutedsl.weights")
    ref = importlib.import_module(
        "flashinfer.moe_ep.kernel_src.sm90.pull_style_cutedsl_megakernel")
    return ep, transform, ref


def cpu_transform(w13_all: torch.Tensor, w2_all: torch.Tensor):  # type: ignore[no-untyped-def]
    """FlashInfer's blockwise FP8 weight transform of the bf16 weights, run on the CPU (what
    ``MoEEpLayer._get_transformed_weights`` returns for this backend)."""
    ep, transform, _ = _load_reference()
    return transform.preprocess_mega_weights(
        ep.MoEWeightPack(w13_all.cpu(), w2_all.cpu()), intermediate_size=INTER, hidden_size=H,
        kind="fp8_e4m3", fp8_scale_mode="blockwise")


def reference(dev: torch.device, transformed: tuple, x: torch.Tensor, ids: torch.Tensor,
              w: torch.Tensor) -> torch.Tensor:
    """FlashInfer's own reference (blockwise, its ``deepgemm`` graph) on ``transformed``
    weights, run on ``dev``; a masked slot's term is zero there. bf16 ``[T, H]`` on the CPU."""
    _, _, ref = _load_reference()
    (w1, s1, _, _), (w2, s2, _, _) = transformed
    w1, s1, w2, s2 = (v.to(dev) for v in (w1, s1, w2, s2))
    q, sf = ref.quantize_fp8_per_token_block(x.to(dev).float(), torch.float8_e4m3fn,
                                             block_k=128)
    terms = ref.compute_megamoe_reference_fp8(
        q[None], sf[None], ids.to(dev).long()[None], w.to(dev).float()[None], w1[None],
        s1[None], w2[None], s2[None], torch.float8_e4m3fn, fp8_scale_mode="blockwise",
        ref_compute_graph="deepgemm")
    return terms[0].float().sum(1).to(torch.bfloat16).cpu()


def main_cpu() -> None:
    """``--cpu`` (module docstring): ``fp8_block_fi`` against FlashInfer's CPU reference."""
    cpu = torch.device("cpu")
    w13_all, w2_all = layer_weights(0, E, H, INTER)
    transformed = cpu_transform(w13_all, w2_all)
    for t in (T, 64):
        x, ids, w = layer_routes(1, t, num_experts=E, top_k=K, hidden=H, mask_p=0.0,
                                 device=cpu, id_dtype=torch.int32)
        fi = recipe("fp8_block_fi", w13_all, w2_all, x, ids, w)
        ref = reference(cpu, transformed, x, ids, w)
        differ = int((fi.view(torch.int16) != ref.view(torch.int16)).sum())
        print(f"T = {t}: fp8_block_fi vs FlashInfer's CPU reference: {differ} of {ref.numel()} "
              f"elements differ; worst row {max(rel(fi, ref)):.2e}", flush=True)


def main_gpu_vs_cpu() -> None:
    """``--gpu-vs-cpu`` (module docstring): FlashInfer's reference on the GPU against itself
    on the CPU and against the model, and every raw FP8 block product its GPU run makes
    (``torch._scaled_mm``, scales 1) against the exact float64 sum of the same bytes."""
    dev, cpu = torch.device("cuda:0"), torch.device("cpu")
    raw: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    scaled_mm = torch._scaled_mm

    def recording(a, b, *args, **kw):  # type: ignore[no-untyped-def]
        out = scaled_mm(a, b, *args, **kw)
        if a.is_cuda:
            raw.append((a.cpu(), b.cpu(), out.cpu()))
        return out

    torch._scaled_mm = recording
    try:
        w13_all, w2_all = layer_weights(0, E, H, INTER)
        transformed = cpu_transform(w13_all, w2_all)
        for t in (T, 64):
            x, ids, w = layer_routes(1, t, num_experts=E, top_k=K, hidden=H, mask_p=0.0,
                                     device=cpu, id_dtype=torch.int32)
            on_gpu = reference(dev, transformed, x, ids, w)
            on_cpu = reference(cpu, transformed, x, ids, w)
            fi = recipe("fp8_block_fi", w13_all, w2_all, x, ids, w)
            print(f"T = {t}: reference GPU vs CPU, worst row {max(rel(on_gpu, on_cpu)):.2e}; "
                  f"fp8_block_fi vs GPU reference {max(rel(fi, on_gpu)):.2e}, vs CPU reference "
                  f"{max(rel(fi, on_cpu)):.2e}", flush=True)
    finally:
        torch._scaled_mm = scaled_mm
    differ = total = 0
    worst = 0.0
    for a, b, out in raw:
        exact = (a.double() @ b.double()).float()
        differ += int((out != exact).sum())
        total += out.numel()
        scale = exact.abs().amax().clamp_min(1e-30)
        worst = max(worst, float((out - exact).abs().amax() / scale))
    print(f"raw FP8 block products on the GPU: {differ} of {total} differ from the exact sum; "
          f"worst error {worst:.2e} of its product's largest magnitude", flush=True)


def _or_error(f: Callable[[], list[float]]) -> list[float] | str:
    try:
        return f()
    except Exception as exc:  # a probe reports what failed and goes on
        return f"error {type(exc).__name__}: {str(exc)[:300]}"


SURVEY = tuple((t, seed) for t in (1, 4, 64) for seed in range(1, 6))
"""The survey's batches: (T, seed), no masked slot."""


def survey(backend: MoEBackend, name: str, dev: torch.device) -> dict[int, float]:
    """``--survey`` / ``--survey-ours`` (module docstring): the worst row of each T over the
    survey's batches, ``backend``'s layer against the oracle's ``name``."""
    from tests.layer_check import build_layer

    w13_all, w2_all = layer_weights(0, E, H, INTER)
    capacity = max(t for t, _ in SURVEY)
    layer = build_layer(backend, LayerSpec(MoEConfig(name, E, K, H, INTER), capacity),
                        w13_all, w2_all, dev)
    worst: dict[int, float] = {}
    for i, (t, seed) in enumerate(SURVEY):
        x, ids, w = layer_routes(seed, t, num_experts=E, top_k=K, hidden=H, mask_p=0.0,
                                 device=dev, id_dtype=torch.int32)
        out = (layer.warmup if i == 0 else layer.forward)(x, ids, w)
        worst[t] = max(worst.get(t, 0.0), *rel(out, recipe(name, w13_all, w2_all, x, ids, w)))
    layer.destroy()
    print(f"{backend.info.name} against {name} on {dev}: worst row of "
          f"{len(SURVEY) // len(worst)} batches at T = "
          + ", ".join(f"{t}: {v:.4f}" for t, v in sorted(worst.items())), flush=True)
    return worst


def main_survey() -> None:
    """``--survey``: FlashInfer's pull against its own recipe (its process, its CuTe DSL)."""
    os.environ.setdefault("MEGA_NO_DIST", "1")
    survey(FP8_PULL, "fp8_block_fi", torch.device("cuda:0"))


def main_survey_ours() -> None:
    """``--survey-ours``: our layer against ``mxfp8`` (our process, our CuTe DSL; the CPU,
    where there is no GPU, runs our layer's Torch path)."""
    from megamoe.backends.registry import load_backend

    dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    survey(load_backend("megamoe"), "mxfp8", dev)


def main() -> None:
    os.environ.setdefault("MEGA_NO_DIST", "1")
    dev = torch.device("cuda:0")
    w13_all, w2_all = layer_weights(0, E, H, INTER)
    spec = LayerSpec(MoEConfig("fp8_block_fi", E, K, H, INTER), C)

    def batch(seed: int, masked: tuple[tuple[int, int], ...] = ()):  # type: ignore[no-untyped-def]
        x, ids, w = layer_routes(seed, T, num_experts=E, top_k=K, hidden=H, mask_p=0.0,
                                 device=dev, id_dtype=torch.int32)
        for r, k in masked:
            ids[r, k], w[r, k] = -1, float("nan")
        return x, ids, w

    def report(tag: str, handle, x, ids, w, out) -> None:  # type: ignore[no-untyped-def]
        block = recipe("fp8_block", w13_all, w2_all, x, ids, w)
        fi = recipe("fp8_block_fi", w13_all, w2_all, x, ids, w)
        print(f"{tag:26s}",
              "kernel-vs-its-reference", _or_error(lambda: rel(out, reference(
                  dev, handle._layer._get_transformed_weights(), x, ids, w))),
              "| kernel-vs-fp8_block", _or_error(lambda: rel(out, block)),
              "| fp8_block_fi-vs-fp8_block", _or_error(lambda: rel(fi, block)),
              "| kernel-vs-fp8_block_fi", _or_error(lambda: rel(out, fi)), flush=True)

    layer = FP8_PULL.build(spec, w13_all, w2_all, device=dev)
    xa, ia, wa = batch(1)
    report("dense", layer, xa, ia, wa, layer.warmup(xa, ia, wa))
    xb, ib, wb = batch(2, masked=((0, 1), (2, 0)))
    report("masked (stale)", layer, xb, ib, wb, layer.forward(xb, ib, wb))
    ids_zero, w_zero = ib.clone(), torch.where(ib < 0, torch.zeros_like(wb), wb)
    for e in range(K + 1):  # one masked slot a row here: the first expert its row lacks
        free = ~(ids_zero == e).any(1, keepdim=True)
        ids_zero = torch.where((ids_zero < 0) & free, torch.full_like(ids_zero, e), ids_zero)
    report("masked (as zero routes)", layer, xb, ib, wb, layer.forward(xb, ids_zero, w_zero))
    layer.destroy()
    fresh = FP8_PULL.build(LayerSpec(spec.config, 2 * C), w13_all, w2_all, device=dev)
    report("masked (fresh workspace)", fresh, xb, ib, wb, fresh.forward(xb, ib, wb))
    fresh.destroy()


if __name__ == "__main__":
    import sys

    modes = {"--cpu": main_cpu, "--gpu-vs-cpu": main_gpu_vs_cpu, "--survey": main_survey,
             "--survey-ours": main_survey_ours}
    if sys.argv[1:] and sys.argv[1] not in modes:
        sys.exit(f"usage: python3 -m devtools.flashinfer_fp8_probe [{' | '.join(modes)}]")
    modes.get(sys.argv[1] if sys.argv[1:] else "", main)()
