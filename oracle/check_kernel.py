"""Judge any MoE kernel against the contract (docs/contract.md s2, s6, s8, s10): PyTorch,
Triton or CUDA, one rank or P.

``check_kernel(kernel, weights, config, capacity=C)`` runs the changing-route scenario
library (``fixtures.scenarios``) through ``kernel`` and reports every failing row:

- **s8.row-tolerance**: every rank's every live row against the oracle (``compare_rows``:
  finite, within the recipe's relative L2 bound, inactive rows exactly ``+0.0``);
- **s8.invariance** (masked contents): the same inputs with NaN, +Inf, -Inf, 0 and the
  router's own score behind every masked slot must give the same output bits. A plain
  comparison with zero scores behind masked slots misses a kernel that reads an id of ``-1``
  as the last expert (its term is multiplied by 0); a NaN or a real score there shows it;
- **s6.combine-slot-order** (when the kernel exposes its per-slot terms): its output must be
  the oracle's masked combine of its own terms, bit for bit. Rounding each partial sum to
  bf16 instead of once stays inside the s8 tolerance; this catches it. Its slots are judged
  too: a failing row names the slots whose term is off and their experts.

The kernel is called as ``kernel(hidden, topk_ids, topk_weights)`` for one rank, or
``kernel([(hidden, topk_ids, topk_weights), ...])`` with every rank's inputs for
``world_size > 1``, and returns ``out`` (bf16 ``[T, H]``), or ``(out, terms)`` with ``terms``
bf16 ``[T, K, H]`` (masked slots may hold anything), per rank. ``weights`` are the oracle's
(``oracle.weights.prepare_weights``): the kernel must compute with the same experts. A
kernel that raises on inputs the contract allows (NaN behind a masked slot, a rank with no
rows) fails too. Nothing here runs on the GPU but the kernel itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from oracle.combine import masked_combine
from oracle.compare import compare_rows
from oracle.experts import expert_terms, moe_forward
from oracle.moe_config import MoEConfig, _bad
from oracle.recipes import get_recipe
from oracle.routing import MASKED_ID, stage_routes
from oracle.weights import ExpertWeights

MASKED_CONTENTS: tuple[float | str, ...] = (float("nan"), float("inf"), float("-inf"), 0.0,
                                            "router")
"""What the invariance check puts behind masked slots (``"router"``: a router-like score)."""

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Failure:
    """One broken rule at one place: the scenario state, rank, row and, where terms were
    compared, the slot and its expert."""

    state: str
    rank: int
    row: int | None
    rule: str
    detail: str
    slot: int | None = None
    expert: int | None = None

    def __str__(self) -> str:
        where = f"{self.state}: rank {self.rank}"
        if self.row is not None:
            where += f", row {self.row}"
        if self.slot is not None:
            where += f", slot {self.slot} (expert {self.expert})"
        return f"{where}: {self.rule}: {self.detail}"


@dataclass(frozen=True)
class KernelReport:
    """What ``check_kernel`` ran and every failure it found; ``ok`` when there is none."""

    checked: tuple[str, ...]
    failures: tuple[Failure, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        head = (f"check_kernel: {len(self.failures)} failure(s) over {len(self.checked)} "
                "check(s)")
        return "\n".join([head, *(f"  {f}" for f in self.failures[:50])]
                         + ([f"  ... and {len(self.failures) - 50} more"]
                            if len(self.failures) > 50 else []))


def _call(kernel: Callable, inputs: list[Inputs], world_size: int
          ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The kernel's per-rank ``(out, terms or None)``, on the CPU."""
    got = kernel(*inputs[0]) if world_size == 1 else kernel(inputs)
    per_rank = [got] if world_size == 1 else list(got)
    if len(per_rank) != world_size:
        raise _bad("kernel result", f"one result per rank ({world_size})", len(per_rank))
    out = []
    for r, item in enumerate(per_rank):
        out_t, terms = (item if isinstance(item, tuple) else (item, None))
        if not isinstance(out_t, torch.Tensor) or out_t.dtype != torch.bfloat16:
            raise _bad(f"kernel result of rank {r}", "a bf16 tensor [T, H] (or (out, terms))",
                       getattr(out_t, "dtype", type(out_t).__name__))
        out.append((out_t.detach().cpu(), None if terms is None else terms.detach().cpu()))
    return out


def _masked_variant(inputs: list[Inputs], content: float | str, seed: int) -> list[Inputs]:
    """Every rank's inputs with ``content`` behind each masked slot."""
    out = []
    for r, (x, ids, w) in enumerate(inputs):
        if content == "router":
            g = torch.Generator().manual_seed(seed * 131 + r)
            fill = (torch.rand(w.shape, generator=g) * 0.9 + 0.05).to(w.dtype).to(w.device)
        else:
            fill = torch.full_like(w, float(content))
        out.append((x, ids, torch.where(ids == MASKED_ID, fill, w)))
    return out


def _slot_failures(state: str, rank: int, row: int, terms: torch.Tensor,
                   want: torch.Tensor, ids: torch.Tensor, tol: float) -> list[Failure]:
    """The slots of a failing row whose term is off (relative L2 above ``tol``)."""
    out = []
    for k in range(ids.shape[1]):
        e = int(ids[row, k])
        if e == MASKED_ID:
            continue
        g, w = terms[row, k].float(), want[row, k].float()
        num, den = float((g - w).norm()), float(w.norm())
        rel = num / den if den > 0 else (0.0 if num == 0 else float("inf"))
        if not rel <= tol:
            out.append(Failure(state, rank, row, "s8.row-tolerance",
                               f"term off by relative L2 {rel:.3g}", k, e))
    return out


def check_kernel(kernel: Callable, weights: ExpertWeights, config: MoEConfig, *,
                 capacity: int, world_size: int = 1, states: Sequence[str] | None = None,
                 seed: int = 0, device: torch.device | str = "cpu",
                 masked_contents: Sequence[float | str] = MASKED_CONTENTS) -> KernelReport:
    """Run ``kernel`` over the scenario states and judge it (module docstring).

    ``states``: names from ``fixtures.scenarios.SCENARIO_NAMES`` (default: the whole
    changing-route sequence); inputs are generated for ``world_size`` ranks, ``capacity``
    rows each, from ``seed``, and handed to the kernel on ``device``.
    """
    from fixtures.scenarios import CHANGING_ROUTE_SEQUENCE, make_scenario

    if not isinstance(config, MoEConfig):
        raise _bad("config", "an oracle.moe_config.MoEConfig", type(config).__name__)
    if not isinstance(weights, ExpertWeights):
        raise _bad("weights", "oracle ExpertWeights (oracle.weights.prepare_weights)",
                   type(weights).__name__)
    if not callable(kernel):
        raise _bad("kernel", "a callable", type(kernel).__name__)
    tol = get_recipe(config.recipe).rel_l2_tolerance
    checked: list[str] = []
    failures: list[Failure] = []
    for name in states or CHANGING_ROUTE_SEQUENCE:
        state = make_scenario(name, world_size=world_size, capacity=capacity,
                              top_k=config.top_k, num_experts=config.num_experts,
                              hidden_size=config.hidden_size, seed=seed)
        cpu_inputs = [r.live() for r in state.ranks]
        inputs = [tuple(t.to(device) for t in x) for x in cpu_inputs]
        try:
            base = _call(kernel, inputs, world_size)  # type: ignore[arg-type]
        except Exception as exc:  # a contract-valid input must not make the kernel raise
            failures.append(Failure(name, -1, None, "s2.masked-any-score",
                                    f"the kernel raised {type(exc).__name__}: {exc}"))
            continue
        for r, ((out, terms), (x, ids, w)) in enumerate(zip(base, cpu_inputs, strict=True)):
            want = moe_forward(x, ids, w, weights, config)
            checked.append(f"{name} rank {r}: rows vs oracle")
            report = compare_rows(out, want, ids, config.recipe, rank=r)
            staged_ids, staged_w = stage_routes(ids, w, max(x.shape[0], 1))
            staged_ids, staged_w = staged_ids[: x.shape[0]], staged_w[: x.shape[0]]
            want_terms = (expert_terms(x, staged_ids, staged_w, weights, config)
                          if terms is not None else None)
            for row in report.failing_rows:
                failures.append(Failure(name, r, row, "s8.row-tolerance",
                                        "; ".join(report.problems)))
                if terms is not None:
                    failures += _slot_failures(name, r, row, terms, want_terms, staged_ids, tol)
            if not report.failing_rows and report.problems:
                failures.append(Failure(name, r, None, "s8.row-tolerance",
                                        "; ".join(report.problems)))
            if terms is not None:
                checked.append(f"{name} rank {r}: output vs the combine of its own terms")
                combined = masked_combine(terms, staged_ids,
                                          staged_w if config.combine_weighting else None)
                differ = (combined.view(torch.int16) != out.view(torch.int16)).any(dim=1)
                for row in differ.nonzero().flatten().tolist():
                    failures.append(Failure(
                        name, r, row, "s6.combine-slot-order",
                        "the output is not the float32 slot-order sum of the kernel's own "
                        "terms rounded once to bf16"))
        for content in masked_contents:
            checked.append(f"{name}: masked slots holding {content}")
            try:
                again = _call(kernel, _masked_variant(inputs, content, seed),  # type: ignore[arg-type]
                              world_size)
            except Exception as exc:
                failures.append(Failure(name, -1, None, "s2.masked-any-score",
                                        f"masked slots holding {content}: the kernel raised "
                                        f"{type(exc).__name__}: {exc}"))
                continue
            for r, ((a, _), (b, _)) in enumerate(zip(base, again, strict=True)):
                differ = (a.view(torch.int16) != b.view(torch.int16)).any(dim=1)
                for row in differ.nonzero().flatten().tolist():
                    failures.append(Failure(
                        name, r, row, "s8.invariance",
                        f"masked slots holding {content} change the row's bits"))
    return KernelReport(tuple(checked), tuple(failures))
