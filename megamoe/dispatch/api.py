"""Dispatch layout launcher (docs/contract.md s3, s8, s9).

``dispatch_layout(staged_ids, num_experts, world_size, workspace=...)`` computes, from the
staged ids of every source rank (int32 ``[C, K]`` each; a slot is active iff
``0 <= id < E``; ``-1`` and out-of-range ids never count):

- ``counts`` int64 ``[P, E]``, ``expert_counts`` ``[E]``, ``rank_counts`` ``[P]``
  (slots each destination rank receives; rank r owns experts ``[r*E/P, (r+1)*E/P)``),
  ``expert_offsets`` ``[E+1]`` (exclusive prefix);
- ``order`` int64 ``[P*C*K, 3]``: rows ``[0, N)`` are ``(src_rank, row, slot)`` of every
  active slot in the stable order ``(expert, src_rank, row, slot)``; rows ``>= N`` are not
  written; ``order_expert`` ``[P*C*K]`` likewise; ``num_routes`` int64 ``[1]`` holds N;
- ``active_extent`` int64 ``[P]``: last row with an active slot + 1 (0 when none).

All outputs are views of a ``LayoutWorkspace`` (capacity-shaped, fixed pointers), so a CUDA
graph captured around the call replays with new ids in place; ``.trimmed()`` gives the
oracle's shapes (it reads N, so it synchronizes). The CuTe DSL kernel runs for CUDA tensors
with ``E <= E_CAP``; otherwise (or with ``use_kernel=False``) the Torch path writes the same
regions. Which path ran is ``result.path`` (``"kernel"`` or ``"torch"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from megamoe.compile_once import capturing as _capturing
from megamoe.compile_once import compile_once
from megamoe.errors import ConfigError
from megamoe.validation import I32_LIMIT
from megamoe.workspace import GUARD_BYTES, pack_regions

STAGED_ID_DTYPE = torch.int32
PATH_KERNEL = "kernel"
PATH_TORCH = "torch"

# Kept in step with megamoe.dispatch.layout_kernel (imported lazily: that module needs the
# CuTe DSL); tests check they agree.
E_CAP = 1024
TILE = 2048


def tiles_per_rank(capacity: int, top_k: int) -> int:
    return max(1, (capacity * top_k + TILE - 1) // TILE)


PLAN_ONE_LAUNCH = "one-launch"
PLAN_FOUR_LAUNCHES = "four-launches"


def kernel_plan(shape: LayoutShape) -> str:
    """Which kernel path a layout of ``shape`` takes: one launch (one CTA) for one rank
    with ``C*K <= TILE`` (decode-size batches), else the four launches
    (``megamoe.dispatch.layout_kernel``). Fixed by the shape, never by the ids."""
    if shape.world_size == 1 and shape.capacity * shape.top_k <= TILE:
        return PLAN_ONE_LAUNCH
    return PLAN_FOUR_LAUNCHES


@dataclass(frozen=True)
class LayoutShape:
    """World size P, capacity C, top-k K and experts E of one layout workspace."""

    world_size: int
    capacity: int
    top_k: int
    num_experts: int

    def __post_init__(self) -> None:
        for name in ("world_size", "capacity", "top_k", "num_experts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, "an int >= 1", repr(v))
        if self.num_experts % self.world_size:
            raise ConfigError(
                "num_experts", f"a multiple of world_size={self.world_size}", self.num_experts
            )

    @property
    def slots(self) -> int:
        """Slots of all ranks, ``P * C * K`` (the capacity of ``order``)."""
        return self.world_size * self.capacity * self.top_k

    @property
    def tiles(self) -> int:
        return self.world_size * tiles_per_rank(self.capacity, self.top_k)


def _region_specs(shape: LayoutShape) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    p, c, k, e = shape.world_size, shape.capacity, shape.top_k, shape.num_experts
    nt = shape.tiles
    return [
        ("stacked_ids", torch.int32, (p, c, k)),
        ("tile_counts", torch.int32, (nt, e)),
        ("tile_base", torch.int32, (nt, e)),
        ("tile_ext", torch.int32, (nt,)),
        ("counts", torch.int64, (p, e)),
        ("expert_counts", torch.int64, (e,)),
        ("rank_counts", torch.int64, (p,)),
        ("expert_offsets", torch.int64, (e + 1,)),
        ("order", torch.int64, (shape.slots, 3)),
        ("order_expert", torch.int64, (shape.slots,)),
        ("active_extent", torch.int64, (p,)),
        ("num_routes", torch.int64, (1,)),
    ]


OUTPUT_REGIONS = (
    "counts", "expert_counts", "rank_counts", "expert_offsets", "order", "order_expert",
    "active_extent", "num_routes",
)


def _normalize_device(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class LayoutWorkspace:
    """Every buffer the dispatch layout writes, in one byte buffer with guard gaps.

    Regions are 16-byte aligned, separated (and surrounded) by ``guard_bytes`` that no call
    writes, so tests can fill the buffer with a pattern and check every byte outside the
    regions. Allocate before graph capture (docs/contract.md s9).
    """

    def __init__(
        self, shape: LayoutShape, device: torch.device | str, guard_bytes: int = GUARD_BYTES
    ) -> None:
        if guard_bytes < 0:
            raise ConfigError("guard_bytes", "an int >= 0", guard_bytes)
        self.shape = shape
        self.device = _normalize_device(torch.device(device))
        self._regions, nbytes = pack_regions(_region_specs(shape), guard_bytes)
        self.buffer = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)

    def regions(self) -> dict[str, tuple[int, int]]:
        """name -> (byte offset, byte size) inside ``buffer``."""
        return {n: (r.offset, r.nbytes) for n, r in self._regions.items()}

    def view(self, name: str) -> torch.Tensor:
        r = self._regions[name]
        return self.buffer[r.offset : r.offset + r.nbytes].view(r.dtype).view(r.shape)


@dataclass(frozen=True)
class DispatchLayoutResult:
    """The dispatch layout (see module docstring); tensors are workspace views."""

    counts: torch.Tensor
    expert_counts: torch.Tensor
    rank_counts: torch.Tensor
    expert_offsets: torch.Tensor
    order: torch.Tensor
    order_expert: torch.Tensor
    active_extent: torch.Tensor
    num_routes: torch.Tensor
    path: str

    def trimmed(self) -> DispatchLayoutResult:
        """The same layout with ``order``/``order_expert`` cut to N rows (reads N: syncs)."""
        n = int(self.num_routes[0])
        return replace(self, order=self.order[:n], order_expert=self.order_expert[:n])


def _check_ids(staged_ids, world_size: int) -> tuple[list[torch.Tensor] | None, torch.Tensor]:
    """(list of per-rank tensors or None, a [P, C, K] tensor or the first rank's [C, K])."""
    if isinstance(staged_ids, torch.Tensor):
        t = staged_ids
        if t.dtype != STAGED_ID_DTYPE:
            raise ConfigError("staged_ids", f"dtype {STAGED_ID_DTYPE}", t.dtype)
        if t.dim() == 2:
            if world_size != 1:
                raise ConfigError(
                    "staged_ids", f"a [P={world_size}, C, K] tensor or a list of {world_size}",
                    f"a 2-D tensor of shape {tuple(t.shape)}",
                )
            t = t.unsqueeze(0)
        if t.dim() != 3 or t.shape[0] != world_size or t.shape[1] < 1 or t.shape[2] < 1:
            raise ConfigError(
                "staged_ids", f"shape [P={world_size}, C>=1, K>=1]", f"shape {tuple(t.shape)}"
            )
        return None, t
    if not isinstance(staged_ids, Sequence):
        raise ConfigError("staged_ids", "a tensor or a sequence of tensors",
                          type(staged_ids).__name__)
    ranks = list(staged_ids)
    if len(ranks) != world_size:
        raise ConfigError("staged_ids", f"{world_size} tensors (world_size)", len(ranks))
    for r, t in enumerate(ranks):
        name = f"staged_ids[{r}]"
        if not isinstance(t, torch.Tensor):
            raise ConfigError(name, "a torch.Tensor", type(t).__name__)
        if t.dtype != STAGED_ID_DTYPE:
            raise ConfigError(name, f"dtype {STAGED_ID_DTYPE}", t.dtype)
        if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
            raise ConfigError(name, "a 2-D tensor [C>=1, K>=1]", f"shape {tuple(t.shape)}")
        if t.shape != ranks[0].shape:
            raise ConfigError(name, f"shape {tuple(ranks[0].shape)} (rank 0's)",
                              f"shape {tuple(t.shape)}")
        if t.device != ranks[0].device:
            raise ConfigError(name, f"device {ranks[0].device} (rank 0's)", t.device)
    return ranks, ranks[0]


def _kernel_ok(ids3: torch.Tensor, shape: LayoutShape) -> str:
    """Empty when the kernel path can run these ids, else the reason it cannot."""
    if ids3.device.type != "cuda":
        return "tensors are not on a CUDA device"
    if shape.num_experts > E_CAP:
        return f"num_experts={shape.num_experts} > {E_CAP}"
    if 3 * shape.slots + TILE > I32_LIMIT:
        return "P*C*K (order entries of 3) does not fit the kernel's int32 indexing"
    span = sum((d - 1) * abs(s) for d, s in zip(ids3.shape, ids3.stride(), strict=True))
    if span > I32_LIMIT or any(s < 0 for s in ids3.stride()):
        return "staged ids strides do not fit int32"
    return ""


_COMPILED: dict[tuple[str, int], object] = {}


def _compiled(device: torch.device, plan: str = PLAN_FOUR_LAUNCHES):
    key = (plan, device.index if device.index is not None else 0)

    def build():  # type: ignore[no-untyped-def]
        from megamoe.dispatch import layout_kernel

        return (layout_kernel.compile_dispatch_layout_one_launch() if plan == PLAN_ONE_LAUNCH
                else layout_kernel.compile_dispatch_layout())

    return compile_once(_COMPILED, key, build, what=f"dispatch_layout kernel ({plan})",
                        warmup="megamoe.dispatch.warmup(device)")


def warmup(device: torch.device | str) -> None:
    """Compile both layout kernels for ``device`` (before any graph capture)."""
    for plan in (PLAN_ONE_LAUNCH, PLAN_FOUR_LAUNCHES):
        _compiled(torch.device(device), plan)


def _ptr(cutlass_type, t: torch.Tensor):
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    return make_ptr(cutlass_type, t.data_ptr(), cute.AddressSpace.gmem,
                    assumed_align=cutlass_type.width // 8)


def _launch(ws: LayoutWorkspace, ids3: torch.Tensor) -> None:
    import cuda.bindings.driver as cuda
    from cutlass import Int32, Int64

    s = ws.shape
    plan = kernel_plan(s)
    compiled = _compiled(ws.device, plan)
    sp, sc, sk = ids3.stride()
    stream = cuda.CUstream(torch.cuda.current_stream(ws.device).cuda_stream)
    v = ws.view
    if plan == PLAN_ONE_LAUNCH:
        compiled(
            _ptr(Int32, ids3), sp, sc, sk, s.capacity, s.top_k, s.num_experts,
            _ptr(Int64, v("counts")), _ptr(Int64, v("expert_counts")),
            _ptr(Int64, v("expert_offsets")), _ptr(Int64, v("rank_counts")),
            _ptr(Int64, v("active_extent")), _ptr(Int64, v("num_routes")),
            _ptr(Int64, v("order")), _ptr(Int64, v("order_expert")),
            stream,
        )
        return
    compiled(
        _ptr(Int32, ids3), sp, sc, sk,
        s.world_size, s.capacity, s.top_k, s.num_experts, tiles_per_rank(s.capacity, s.top_k),
        _ptr(Int32, v("tile_counts")), _ptr(Int32, v("tile_base")), _ptr(Int32, v("tile_ext")),
        _ptr(Int64, v("counts")), _ptr(Int64, v("expert_counts")),
        _ptr(Int64, v("expert_offsets")), _ptr(Int64, v("rank_counts")),
        _ptr(Int64, v("active_extent")), _ptr(Int64, v("num_routes")),
        _ptr(Int64, v("order")), _ptr(Int64, v("order_expert")),
        stream,
    )


def _torch_fill(ws: LayoutWorkspace, ids3: torch.Tensor) -> None:
    from megamoe.dispatch.torch_path import torch_layout

    if _capturing(ws.device):
        raise ConfigError(
            "staged_ids", "a case the layout kernel covers while a CUDA graph is captured",
            "a Torch-path case", "the Torch path sizes its outputs from the data",
        )
    out = torch_layout(ids3, ws.shape.num_experts)
    n = out["order"].shape[0]
    for name in OUTPUT_REGIONS:
        dst = ws.view(name)
        if name in ("order", "order_expert"):
            dst = dst[:n]
        dst.copy_(out[name])


def _result(ws: LayoutWorkspace, path: str) -> DispatchLayoutResult:
    return DispatchLayoutResult(
        counts=ws.view("counts"), expert_counts=ws.view("expert_counts"),
        rank_counts=ws.view("rank_counts"), expert_offsets=ws.view("expert_offsets"),
        order=ws.view("order"), order_expert=ws.view("order_expert"),
        active_extent=ws.view("active_extent"), num_routes=ws.view("num_routes"), path=path,
    )


def dispatch_layout(
    staged_ids: torch.Tensor | Sequence[torch.Tensor],
    num_experts: int,
    world_size: int,
    *,
    workspace: LayoutWorkspace | None = None,
    use_kernel: bool | None = None,
) -> DispatchLayoutResult:
    """The dispatch layout of staged routes (module docstring; docs/contract.md s3, s8).

    ``staged_ids``: a ``[P, C, K]`` int32 tensor (any strides; read in place), a ``[C, K]``
    tensor when ``world_size == 1``, or a sequence of P ``[C, K]`` int32 tensors (copied into
    the workspace first). ``workspace``: allocated here when omitted (not during capture).
    ``use_kernel``: None picks the kernel when it covers the case, True insists (ConfigError
    when it cannot run), False forces the Torch path. Caller tensors are never written.
    """
    shape_checked = LayoutShape(
        world_size=world_size, capacity=1, top_k=1, num_experts=num_experts
    )  # validates P and E before the ids are looked at
    ranks, first = _check_ids(staged_ids, shape_checked.world_size)
    capacity, top_k = (first.shape[0], first.shape[1]) if ranks is not None else (
        first.shape[1], first.shape[2]
    )
    shape = LayoutShape(world_size, capacity, top_k, num_experts)
    device = first.device
    if workspace is None:
        if _capturing(device):
            raise ConfigError("workspace", "a LayoutWorkspace allocated before capture", None)
        workspace = LayoutWorkspace(shape, device)
    if workspace.shape != shape:
        raise ConfigError("workspace", f"shape {shape}", f"shape {workspace.shape}")
    if workspace.device != _normalize_device(device):
        raise ConfigError("workspace", f"device {device}", workspace.device)
    if ranks is None:
        ids3 = first
    elif len(ranks) == 1:
        ids3 = ranks[0].unsqueeze(0)
    else:
        ids3 = workspace.view("stacked_ids")
        for r, t in enumerate(ranks):
            ids3[r].copy_(t)
    reason = _kernel_ok(ids3, shape)
    if use_kernel is True and reason:
        raise ConfigError("use_kernel", "a case the layout kernel covers", reason)
    if use_kernel is False or reason:
        _torch_fill(workspace, ids3)
        return _result(workspace, PATH_TORCH)
    _launch(workspace, ids3)
    return _result(workspace, PATH_KERNEL)
