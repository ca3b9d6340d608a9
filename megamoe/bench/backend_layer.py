"""Any MegaMoE behind the backend interface (``megamoe.backends``) as a benchmark arm, on the
``layer`` benchmark's cases: ``backend_layer(name, weighting)`` builds backend ``name``'s EP1
layer for the case's shape (bf16 recipe, the ``layer`` benchmark's shared weights and inputs,
the score applied where ``weighting`` says: docs/contract.md s5, s12), warms it up and times
``forward``. Its check: the first ``CHECK_TOKENS`` rows against the oracle within
docs/contract.md s8. It declares the ``layer`` benchmarks' work for its recipe (the touched
experts' weight bytes, scales included, up to T = 64; FLOPs above, against the bf16 or the FP8
matmul rate: ``RECIPE_WORK``), so every backend is read against the same ceilings.

The builders below are module attributes so that a remote arm's worker can import them
(``RemoteSpec("megamoe.bench.backend_layer:FLASHINFER_CAKE_LATE")``).
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from megamoe.bench.benchmarks.layer import (
    BF16_BYTES_PER_WEIGHT,
    CHECK_TOKENS,
    _inputs,
    _shape,
    _weights,
    _work,
    release_weights,
)
from megamoe.bench.benchmarks.layer_quantized import RECIPES
from megamoe.bench.registry import BuildContext, Builder, Case, Workload
from oracle.moe_config import MoEConfig
from oracle.weights import ExpertWeights, prepare_weights

FP8_BLOCK_BYTES_PER_WEIGHT = 1 + 4 / (128 * 128)
"""``fp8_block`` and ``fp8_block_fi`` weights: one E4M3 byte each and a float32 scale per
128 x 128 tile."""
RECIPE_WORK: dict[str, tuple[float, str]] = {
    "bf16": (BF16_BYTES_PER_WEIGHT, "bf16_mm"),
    **{q.recipe: (q.bytes_per_weight, "fp8_mm") for q in RECIPES},
    "fp8_block": (FP8_BLOCK_BYTES_PER_WEIGHT, "fp8_mm"),
    "fp8_block_fi": (FP8_BLOCK_BYTES_PER_WEIGHT, "fp8_mm"),
}
"""Per recipe: weight bytes per weight and the matmul ceiling its FLOPs are read against."""


def reference_routes(ids: torch.Tensor, scores: torch.Tensor, w13: torch.Tensor,
                     w2: torch.Tensor, cfg: MoEConfig
                     ) -> tuple[torch.Tensor, torch.Tensor, ExpertWeights, MoEConfig]:
    """``(ids, scores, weights, config)`` for ``oracle.experts.moe_forward`` on these routes,
    holding no full copy of the weights: bf16 weights are referenced as they are (the recipe's
    format), and a quantized recipe's weights are prepared for the experts these routes touch
    only, with the ids renumbered onto them (every recipe quantizes each expert on its own,
    docs/contract.md s4, so the touched experts' bytes are those of the whole tensor). At the
    DeepSeek-like shape a full quantized copy beside the layer's own and the shared bf16 weights
    (21 GiB each) does not fit an H100's 80 GB."""
    if cfg.recipe == "bf16":
        return ids, scores, ExpertWeights("bf16", w13, w2), cfg
    touched = torch.unique(ids[ids >= 0])
    if touched.numel() < cfg.top_k:  # the config needs E >= K: add experts no route reads
        used = set(touched.tolist())
        spare = torch.tensor([e for e in range(cfg.num_experts) if e not in used],
                             dtype=touched.dtype, device=touched.device)
        touched = torch.sort(torch.cat((touched, spare[: cfg.top_k - touched.numel()]))).values
    local = torch.where(ids >= 0, torch.searchsorted(touched, ids.clamp(min=0)), ids)
    sub = dataclasses.replace(cfg, num_experts=int(touched.numel()))
    return local.to(ids.dtype), scores, prepare_weights(w13[touched], w2[touched], sub), sub


def backend_layer(backend: str, weighting: str, recipe: str = "bf16") -> Builder:
    """The builder of ``backend``'s ``recipe`` layer with the score applied ``weighting``
    (module docstring); a backend that refuses the case raises its refusal."""
    if recipe not in RECIPE_WORK:
        raise ValueError(f"recipe: expected one of {sorted(RECIPE_WORK)}, got {recipe!r}")

    def build(case: Case, ctx: BuildContext) -> Workload:
        from megamoe.backends import WEIGHTINGS, LayerSpec, load_backend
        from megamoe.errors import ConfigError
        from oracle.compare import compare_rows
        from oracle.experts import moe_forward

        s = _shape(case)
        t = case.shape["tokens"]
        cfg = MoEConfig(recipe, s.experts, s.top_k, s.hidden, s.inter, **WEIGHTINGS[weighting])
        spec, impl = LayerSpec(cfg, t), load_backend(backend)
        why = impl.refusal(spec, ctx.device, ctx.world_size)  # before any weight is made
        if why is not None:
            raise ConfigError("backend", f"a backend that builds {case.name}", why)
        w13, w2 = _weights(s, ctx.device)
        handle = impl.build(spec, w13, w2, device=ctx.device)
        x, ids, w = _inputs(case, ctx)
        handle.warmup(x, ids, w)
        n = min(t, CHECK_TOKENS)
        # the reference rows now, so that the check holds no weights (after_build)
        want = moe_forward(x[:n], *reference_routes(ids[:n], w[:n], w13, w2, cfg))
        del w13, w2
        if ctx.device.type == "cuda":  # what an arm holds, for a run that ends out of memory
            held = torch.cuda.memory_allocated(ctx.device) / 2**30
            print(f"{backend} {case.name}: built, {held:.1f} GiB allocated in this process",
                  file=sys.stderr)

        def check() -> None:
            report = compare_rows(handle.forward(x, ids, w)[:n], want, ids[:n], recipe)
            if report.problems:
                raise AssertionError(f"{backend} {case.name}: {report.problems}")

        return Workload(lambda: handle.forward(x, ids, w), check=check,
                        **_work(case, ids, *RECIPE_WORK[recipe]))  # type: ignore[arg-type]

    build.__qualname__ = f"backend_layer[{backend},{weighting},{recipe}]"
    return build


def after_build() -> None:
    """Called by a remote arm's worker once its workload is built
    (``megamoe.bench.remote_worker``): drop the shared weights. The worker builds one
    workload, whose layer keeps what it needs and whose check keeps only its reference rows;
    at the whole DeepSeek-like shape the generated weights (21 GiB) beside FlashInfer's copy
    and our process's would not fit an H100's 80 GB."""
    release_weights()


MEGAMOE_LATE = backend_layer("megamoe", "late")
FLASHINFER_CAKE_LATE = backend_layer("flashinfer-sm90-cake", "late")
MEGAMOE_MXFP8 = backend_layer("megamoe", "early", "mxfp8")
FLASHINFER_FP8_PULL = backend_layer("flashinfer-sm90-fp8-pull", "early", "fp8_block_fi")
