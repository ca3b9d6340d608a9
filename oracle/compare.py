"""The CONTRACTS.md s8 comparison rule for outputs that pass through a GEMM, defined once.

``compare_rows(got, want, topk_ids, recipe)`` judges a layer output against the oracle's:
every live row (a row with an active slot) finite; the relative L2 error of every live row
and of the whole output at most the recipe's bound (``oracle.recipes``:
``rel_l2_tolerance``); every inactive row exactly ``+0.0`` in every column (bitwise, so
``-0.0`` and NaN fail). There is no absolute tolerance: an all-zero output against a
non-zero reference fails, and a live row whose reference is zero passes only when it is
zero too. The report carries the worst row's and the whole output's error and one line per
broken rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oracle.recipes import get_recipe


@dataclass(frozen=True)
class RowReport:
    """What ``compare_rows`` found; ``problems`` is empty when the output passes."""

    worst_row_rel_l2: float
    total_rel_l2: float
    problems: tuple[str, ...]


def active_rows(ids: torch.Tensor) -> torch.Tensor:
    """bool ``[T]``: rows with at least one active slot (id != -1)."""
    return (ids.cpu() != -1).any(dim=1)


def compare_rows(got: torch.Tensor, want: torch.Tensor, ids: torch.Tensor,
                 recipe: str) -> RowReport:
    """CONTRACTS.md s8 over every row (see module docstring)."""
    tol = get_recipe(recipe).rel_l2_tolerance
    got32, want32 = got.cpu().float(), want.cpu().float()
    live = active_rows(ids)
    problems: list[str] = []
    if got.shape != want.shape:
        return RowReport(float("inf"), float("inf"), (f"shape {tuple(got.shape)} != "
                                                      f"{tuple(want.shape)}",))
    dead = got.cpu()[~live].view(torch.int16)
    if dead.numel() and not bool((dead == 0).all()):
        bad = int((~(dead == 0).all(dim=1)).nonzero()[0])
        problems.append(f"inactive row {int((~live).nonzero()[bad])} is not exactly +0.0")
    worst, total = 0.0, 0.0
    if bool(live.any()):
        g, w = got32[live], want32[live]
        if not bool(torch.isfinite(g).all()):
            r = int((~torch.isfinite(g).all(dim=1)).nonzero()[0])
            problems.append(f"live row {int(live.nonzero()[r])} is not finite")
        num = (g - w).norm(dim=1)
        den = w.norm(dim=1)
        rel = torch.where(den > 0, num / den, torch.where(num > 0, torch.inf, 0.0))
        worst = float(rel.max())
        total = float((g - w).norm() / w.norm()) if float(w.norm()) > 0 else float(
            "inf" if float((g - w).norm()) > 0 else 0.0)
        if worst > tol:
            r = int(rel.argmax())
            problems.append(f"live row {int(live.nonzero()[r])}: relative L2 {worst:.3g} > {tol}")
        if total > tol:
            problems.append(f"whole output: relative L2 {total:.3g} > {tol}")
    return RowReport(worst, total, tuple(problems))
