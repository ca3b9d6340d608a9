"""The docs/contract.md s8 comparison rule for outputs that pass through a GEMM, defined once.

``compare_rows(got, want, topk_ids, recipe)`` judges a layer output against the oracle's:
every live row (a row with an active slot) finite, in the output and in the reference (a
reference row that is not finite is a failure of the comparison, never a pass); the relative
L2 error of every live row and of the whole output at most the recipe's bound
(``oracle.recipes``: ``rel_l2_tolerance``); every inactive row exactly ``+0.0`` in every
column (bitwise, so ``-0.0`` and NaN fail). There is no absolute tolerance: an all-zero
output against a non-zero reference fails, and a live row whose reference is zero passes
only when it is zero too.

The report names every failing row (``failing_rows``; with ``rank`` given, each problem line
says the rank too), carries the worst row's and the whole output's error, and one line per
broken rule. Bad arguments (not tensors, a dtype other than bf16 where the contract says
bf16, shapes that do not match) raise ``ValueError`` naming the argument, the expected and
the actual value, like the rest of the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oracle.moe_config import _bad
from oracle.recipes import get_recipe

_LISTED = 8
"""Rows each problem line names before it says how many more there are."""


@dataclass(frozen=True)
class RowReport:
    """What ``compare_rows`` found; ``problems`` is empty when the output passes.
    ``failing_rows``: every row that broke a rule, ascending."""

    worst_row_rel_l2: float
    total_rel_l2: float
    problems: tuple[str, ...]
    failing_rows: tuple[int, ...] = ()


def active_rows(ids: torch.Tensor) -> torch.Tensor:
    """bool ``[T]``: rows with at least one active slot (id != -1)."""
    return (ids.cpu() != -1).any(dim=1)


def _check(got: object, want: object, ids: object) -> None:
    for name, t in (("got", got), ("want", want), ("topk_ids", ids)):
        if not isinstance(t, torch.Tensor):
            raise _bad(name, "a torch.Tensor", type(t).__name__)
    for name, t in (("got", got), ("want", want)):
        if t.dtype != torch.bfloat16:  # type: ignore[union-attr]
            raise _bad(f"{name}.dtype", "torch.bfloat16 (the layer's output, docs/contract.md s5 "
                       "step 7 and s6)", t.dtype)  # type: ignore[union-attr]
        if t.dim() != 2:  # type: ignore[union-attr]
            raise _bad(f"{name}.shape", "[T, H]", tuple(t.shape))  # type: ignore[union-attr]
    if want.shape != got.shape:  # type: ignore[union-attr]
        raise _bad("want.shape", f"got's shape {tuple(got.shape)}",  # type: ignore[union-attr]
                   tuple(want.shape))  # type: ignore[union-attr]
    if ids.dim() != 2 or ids.shape[0] != got.shape[0]:  # type: ignore[union-attr]
        raise _bad("topk_ids.shape", f"[T={got.shape[0]}, K]",  # type: ignore[union-attr]
                   tuple(ids.shape))  # type: ignore[union-attr]


def _rows_line(what: str, rows: list[int], where: str) -> str:
    shown = ", ".join(map(str, rows[:_LISTED]))
    more = len(rows) - _LISTED
    tail = f" and {more} more" if more > 0 else ""
    return f"{where}{what} {len(rows)} row(s): {shown}{tail}"


def compare_rows(got: torch.Tensor, want: torch.Tensor, ids: torch.Tensor,
                 recipe: str, *, rank: int | None = None) -> RowReport:
    """docs/contract.md s8 over every row (see module docstring)."""
    _check(got, want, ids)
    tol = get_recipe(recipe).rel_l2_tolerance
    where = "" if rank is None else f"rank {rank}: "
    got_cpu, want_cpu = got.cpu(), want.cpu()
    got32, want32 = got_cpu.float(), want_cpu.float()
    live = active_rows(ids)
    index = torch.arange(got.shape[0])
    problems: list[str] = []
    failing: set[int] = set()

    def report(what: str, mask: torch.Tensor) -> None:
        rows = index[mask].tolist()
        if rows:
            failing.update(rows)
            problems.append(_rows_line(what, rows, where))

    dead_bits = got_cpu.view(torch.int16)
    report("inactive rows not exactly +0.0:", ~live & (dead_bits != 0).any(dim=1))
    report("live rows not finite in the output:", live & ~torch.isfinite(got32).all(dim=1))
    report("live rows not finite in the reference:", live & ~torch.isfinite(want32).all(dim=1))
    worst, total = 0.0, 0.0
    if bool(live.any()):
        g, w = got32[live], want32[live]
        num = (g - w).norm(dim=1)
        den = w.norm(dim=1)
        rel = torch.where(den > 0, num / den, torch.where(num > 0, torch.inf, 0.0))
        rel = torch.where(torch.isnan(rel), torch.inf, rel)
        worst = float(rel.max())
        t_num, t_den = float((g - w).norm()), float(w.norm())
        total = t_num / t_den if t_den > 0 else (0.0 if t_num == 0 else float("inf"))
        if total != total:  # NaN
            total = float("inf")
        over = torch.zeros_like(live)
        over[live] = rel > tol
        report(f"live rows above relative L2 {tol} (worst {worst:.3g}):", over)
        if total > tol:
            problems.append(f"{where}whole output: relative L2 {total:.3g} > {tol}")
    return RowReport(worst, total, tuple(problems), tuple(sorted(failing)))
