"""Where our layer applies a route's score, read on its stages (docs/contract.md s5.weighting).

Early weighting multiplies each GEMM row's float32 ``act`` by its score, once, before A2;
late weighting leaves ``act`` alone and weights the FC2 term. The output cannot always tell
them apart: ``fp8_mxfp4``'s per-row A2 scale absorbs the score, and no output bit moves. The
stages can: ``act_early == act_late * score`` bitwise for the quantized recipes, and for
``bf16`` (no float32 ``act`` stage) the early A2 is the late A2 times the score within two bf16
roundings. The host tier reads the CPU layer's stages, the single tier the kernels'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.layer import MoELayer

__all__ = ["WeightingStages", "stages_after_forward", "weighting_problems"]


@dataclass(frozen=True)
class WeightingStages:
    """A layer's stages on its live GEMM rows after one forward (on the CPU)."""

    act: torch.Tensor | None
    """float32 ``act`` rows (quantized recipes), ``None`` for ``bf16``."""
    a2: torch.Tensor
    """The bf16 A2 rows as float32 (the quantized recipes keep a bf16 A2 of zeros)."""
    score: torch.Tensor
    """float32 score of each live row."""
    live: int
    """How many GEMM rows are live."""


def stages_after_forward(layer: MoELayer, hidden: torch.Tensor, ids: torch.Tensor,
                         scores: torch.Tensor) -> WeightingStages:
    """Warm ``layer`` up, run one forward and read its stages on the live GEMM rows: those
    with a score (the expert segments are padded, so the live rows are not the first ``n``;
    the caller's active scores must all be non-zero)."""
    layer.warmup(hidden, ids, scores)
    layer.forward(hidden, ids, scores)
    if layer._row_scale.is_cuda:
        torch.cuda.synchronize(layer._row_scale.device)
    score = layer._row_scale[: layer._m_cap]
    live = score != 0
    act = layer._act[live].float().cpu() if layer._act.numel() else None
    return WeightingStages(act, layer._a2[live].float().cpu(), score[live].cpu(),
                           int(live.sum()))


def weighting_problems(recipe: str, early: WeightingStages, late: WeightingStages) -> list[str]:
    """What is wrong with two layers' stages if ``early`` weighted each row's ``act`` by its
    score before A2 and ``late`` did not (module docstring), one line per failing GEMM row.
    The stages must differ, so a score of 1 is refused."""
    score = early.score
    problems = []
    if bool((score == 1).any()):
        problems.append("a score of 1 cannot tell early from late")
    if early.act is not None and late.act is not None:
        want = late.act * score[:, None]
        bad = (early.act.view(torch.int32) != want.view(torch.int32)).any(dim=1)
        problems += [f"{recipe}: GEMM row {r}: act != late act * score" for r in
                     bad.nonzero().flatten().tolist()]
        if early.live and torch.equal(early.act, late.act):
            problems.append(f"{recipe}: early and late act are equal")
    else:
        want = late.a2 * score[:, None]
        # |bf16(x*s) - bf16(x)*s| <= 2 u |x*s| and |want| >= (1 - u) |x*s|, u = 2**-8
        tol = 2.0 ** -7 / (1 - 2.0 ** -8) * want.abs() + 2.0 ** -133
        bad = ((early.a2 - want).abs() > tol).any(dim=1)
        problems += [f"{recipe}: GEMM row {r}: A2 != late A2 * score within 2 bf16 roundings"
                     for r in bad.nonzero().flatten().tolist()]
        if early.live and torch.equal(early.a2, late.a2):
            problems.append(f"{recipe}: early and late A2 are equal")
    return problems
