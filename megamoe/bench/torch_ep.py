"""A stock-PyTorch EP layer: the ``ep_layer`` benchmark's baseline for an EP world (issue 38:
"against a stock-PyTorch EP layer (NCCL all_to_all plus ``torch._grouped_mm``)").

bf16 weights, early weighting, no clamp (docs/contract.md s5-s7); rank ``r`` of ``P`` holds
experts ``[r * E/P, (r + 1) * E/P)`` and computes, for its rows:

1. each active slot's owner rank; the slots sorted by owner (stable); the count per peer
   exchanged with ``all_to_all_single``, and the split sizes read on the host (as stock EP
   code does);
2. each sent slot's hidden row, local expert and score to its owner (three
   ``all_to_all_single`` calls with those splits; rows as int32 pairs of bf16);
3. the owner sorts what it received by local expert: ``torch._grouped_mm`` for FC1, SwiGLU
   times the score in float32, bf16, ``torch._grouped_mm`` for FC2 (the bf16 term);
4. the terms back with the splits reversed, each at its slot, summed over the slots in
   float32, then bf16 (masked slots add nothing; a row that routes nowhere is ``+0.0``).

Where the collectives run: in a real world over an NCCL group of the world's ranks (made
once, collectively); in an emulated or CPU world over the world's gloo group with the
payload staged through host memory (NCCL hangs with two ranks on one GPU), which makes it a
correctness baseline there, never a speed one. Its rows meet the collective oracle within
docs/contract.md s8 (``tests/multi/test_ep_bench.py``); they are not bitwise our layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from megamoe.comm.world import World

_NCCL: dict[str, dist.ProcessGroup] = {}


def exchange_group(world: World) -> tuple[dist.ProcessGroup, bool]:
    """The process group the baseline's all-to-alls use and whether they take the rank's
    device tensors (NCCL, real worlds) or host copies (gloo; module docstring)."""
    if world.mode == "real":
        key = world.group_name()  # type: ignore[attr-defined]
        if key not in _NCCL:
            _NCCL[key] = dist.new_group(list(range(world.size)), backend="nccl")
        return _NCCL[key], True
    return world.group, False  # type: ignore[attr-defined]


def all_to_all(group: dist.ProcessGroup, on_device: bool, send: torch.Tensor,
                send_splits: list[int], recv_splits: list[int]) -> torch.Tensor:
    """``send`` rows split by ``send_splits`` to each rank; the rows every rank sent here."""
    src = send if on_device else send.cpu()
    out = src.new_empty((sum(recv_splits), *send.shape[1:]))
    dist.all_to_all_single(out, src.contiguous(), recv_splits, send_splits, group=group)
    return out.to(send.device)


@dataclass(frozen=True)
class TorchEpLayer:
    """The stock-PyTorch EP layer of one rank (module docstring): ``w13 [E/P, 2I, H]`` and
    ``w2 [E/P, H, I]`` bf16, this rank's experts only."""

    w13: torch.Tensor
    w2: torch.Tensor
    world: World

    def forward(self, x: torch.Tensor, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """bf16 ``[T, H]`` for this rank's rows (collective: every rank calls it)."""
        group, on_device = exchange_group(self.world)
        e_local, inter, h = self.w13.shape[0], self.w2.shape[2], x.shape[1]
        p = self.world.size
        t, k = ids.shape
        flat = ids.reshape(-1).to(torch.int64)
        active = flat >= 0
        owner = torch.where(active, flat // e_local, p)
        order = torch.argsort(owner, stable=True)
        send_counts = torch.bincount(owner, minlength=p + 1)[:p]
        recv_counts = all_to_all(group, on_device, send_counts, [1] * p, [1] * p)
        send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
        sent = order[: sum(send_splits)]
        rows = x[sent // k].contiguous().view(torch.int32)
        local = flat[sent] - owner[sent] * e_local
        score = scores.reshape(-1)[sent].to(torch.float32)
        got_rows = all_to_all(group, on_device, rows, send_splits, recv_splits)
        got_expert = all_to_all(group, on_device, local, send_splits, recv_splits)
        got_score = all_to_all(group, on_device, score, send_splits, recv_splits)
        terms = self._experts(got_rows.view(torch.bfloat16), got_expert, got_score, e_local,
                              inter, h)
        back = all_to_all(group, on_device, terms.view(torch.int32), recv_splits, send_splits)
        slot_terms = torch.zeros(t * k, h, dtype=torch.float32, device=x.device)
        slot_terms[sent] = back.view(torch.bfloat16).float()
        return slot_terms.view(t, k, h).sum(1).to(torch.bfloat16)

    def _experts(self, rows: torch.Tensor, expert: torch.Tensor, score: torch.Tensor,
                 e_local: int, inter: int, h: int) -> torch.Tensor:
        """The bf16 term of each received row, in the order received."""
        if rows.shape[0] == 0:
            return rows.new_zeros((0, h))
        order = torch.argsort(expert, stable=True)
        counts = torch.bincount(expert, minlength=e_local)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        h1 = torch._grouped_mm(rows[order], self.w13.transpose(1, 2), offs=offs)
        gate, up = h1[:, :inter].float(), h1[:, inter:].float()
        act = (up * gate * torch.sigmoid(gate) * score[order].unsqueeze(1)).to(torch.bfloat16)
        h2 = torch._grouped_mm(act, self.w2.transpose(1, 2), offs=offs)
        terms = torch.empty_like(h2)
        terms[order] = h2
        return terms
