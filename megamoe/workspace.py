"""Capacity-shaped staging workspace with named regions (docs/contract.md s3, s9; DESIGN.md).

Everything a staging call writes lives in one byte buffer sized by capacity ``C``:
the staged routes, the activation payload and scales in the recipe's wire format,
and the route-check bookkeeping (per-row status codes, the caller's bad id/score,
the sticky status word). Each region is a fixed, 16-byte aligned byte range of the
buffer, so a forward captured in a CUDA graph keeps its pointers and replays with
new contents. ``guard_bytes`` leaves untouched gaps before, between and after the
regions; tests fill the whole buffer with a pattern and check that every byte outside
the regions keeps it (docs/contract.md s3: nothing outside the documented regions is written).

The route-check setting in force (``MEGAMOE_CHECK_ROUTES``, docs/contract.md s2) is recorded
here at warmup and at graph capture (``check_routes``; see ``megamoe.route_check_setting``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from megamoe.errors import ConfigError

REGION_ALIGN = 16
"""Byte alignment of every region of a workspace (staging, layout, symmetric)."""
GUARD_BYTES = 64
"""Bytes a workspace leaves before, between and after its regions, which no call writes:
the tests fill them and check they survive (a stray write past a region shows there)."""

FORMAT_KINDS = ("bf16", "mxfp8", "mxfp8_prequant", "nvfp4", "nvfp4_prequant", "safe_fp8")
MX_ELEMS = ("e4m3", "e5m2")
MX_MODES = ("rceil", "floor")


@dataclass(frozen=True)
class StageFormat:
    """The activation wire format of a staging call.

    ``kind``: ``bf16`` (bf16 copied), ``mxfp8`` (bf16 quantized to MXFP8), ``mxfp8_prequant``
    (MXFP8 payload and E8M0 scales copied), ``nvfp4`` (bf16 quantized to NVFP4 with the layer
    input global scale), ``nvfp4_prequant`` (NVFP4 copied), ``safe_fp8`` (per-token safe FP8,
    the ``fp8_mxfp4`` recipe). ``elem``/``mode`` apply to the MXFP8 kinds (docs/contract.md s4).
    """

    kind: str
    elem: str = "e4m3"
    mode: str = "rceil"

    def __post_init__(self) -> None:
        if self.kind not in FORMAT_KINDS:
            raise ConfigError("format.kind", f"one of {FORMAT_KINDS}", repr(self.kind))
        if self.elem not in MX_ELEMS:
            raise ConfigError("format.elem", f"one of {MX_ELEMS}", repr(self.elem))
        if self.mode not in MX_MODES:
            raise ConfigError("format.mode", f"one of {MX_MODES}", repr(self.mode))

    @property
    def is_mx(self) -> bool:
        return self.kind in ("mxfp8", "mxfp8_prequant")

    @property
    def is_nvfp4(self) -> bool:
        return self.kind in ("nvfp4", "nvfp4_prequant")

    @property
    def quantizes(self) -> bool:
        return self.kind in ("mxfp8", "nvfp4", "safe_fp8")

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.elem}:{self.mode}" if self.is_mx else self.kind


def _ceil_to(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def payload_spec(fmt: StageFormat, capacity: int, hidden: int) -> tuple[torch.dtype, tuple]:
    """dtype and shape of the activation payload region."""
    if fmt.kind == "bf16":
        return torch.bfloat16, (capacity, hidden)
    if fmt.is_mx:
        dt = torch.float8_e4m3fn if fmt.elem == "e4m3" else torch.float8_e5m2
        return dt, (capacity, hidden)
    if fmt.is_nvfp4:
        return torch.uint8, (capacity, hidden // 2)
    return torch.float8_e4m3fn, (capacity, hidden)  # safe_fp8


def scale_spec(fmt: StageFormat, capacity: int, hidden: int) -> tuple[torch.dtype, tuple] | None:
    """dtype and shape of the scale region (None for bf16).

    MXFP8: E8M0 bytes ``[C, ceil(ceil(H/32)/4)*4]`` (padding columns written as zero);
    NVFP4: E4M3 ``[C, H/16]``; safe FP8: the float32 wire ``[C, 4]``.
    """
    if fmt.is_mx:
        return torch.uint8, (capacity, _ceil_to(-(-hidden // 32), 4))
    if fmt.is_nvfp4:
        return torch.float8_e4m3fn, (capacity, hidden // 16)
    if fmt.kind == "safe_fp8":
        return torch.float32, (capacity, 4)
    return None


@dataclass(frozen=True)
class Region:
    """One named region: byte offset and size inside the buffer, dtype and shape."""

    name: str
    offset: int
    dtype: torch.dtype
    shape: tuple

    @property
    def nbytes(self) -> int:
        n = torch.empty((), dtype=self.dtype).element_size()
        for s in self.shape:
            n *= s
        return n


def pack_regions(specs: Sequence[tuple[str, torch.dtype, tuple]],
                 guard_bytes: int) -> tuple[dict[str, Region], int]:
    """Lay ``(name, dtype, shape)`` regions out in one byte buffer, in order: each starts
    ``REGION_ALIGN``-aligned, with ``guard_bytes`` before the first, between two and after
    the last. Returns the regions and the buffer's size (a multiple of ``REGION_ALIGN``).
    The staging, layout and symmetric workspaces are laid out by it."""
    regions: dict[str, Region] = {}
    offset = guard_bytes
    for name, dtype, shape in specs:
        r = Region(name, _ceil_to(offset, REGION_ALIGN), dtype, tuple(shape))
        regions[name] = r
        offset = r.offset + r.nbytes + guard_bytes
    return regions, _ceil_to(offset, REGION_ALIGN)


def region_mask(regions: Iterable[Region], nbytes: int, device: torch.device) -> torch.Tensor:
    """Bool over ``nbytes`` buffer bytes: True inside one of ``regions`` (may be written)."""
    mask = torch.zeros(nbytes, dtype=torch.bool, device=device)
    for r in regions:
        mask[r.offset : r.offset + r.nbytes] = True
    return mask


@dataclass
class StagingWorkspace:
    """One rank's staging workspace. Build with :meth:`create`.

    Regions (docs/contract.md s3): ``ids`` int32 [C,K], ``scores`` float32 [C,K], ``payload``,
    ``scales`` (absent for bf16), ``row_code`` int32 [C] (0 = good row, else the first bad
    (slot, rule) of the row, see ``megamoe.staging.constants``), ``bad_id`` int64 [C] and
    ``bad_score`` float64 [C] (the caller's id and score at that slot; slot 0's for a
    non-finite safe-FP8 input row; written only for rows recorded bad), ``status`` int32 [1]
    (sticky: nonzero once any checked call found a bad row; ``check_errors`` clears it).
    """

    capacity: int
    top_k: int
    hidden_size: int
    fmt: StageFormat
    buffer: torch.Tensor
    regions: dict[str, Region]
    guard_bytes: int
    check_routes: bool | None = None
    last_path: str | None = None
    last_path_reason: str = ""
    captured: bool = False
    _views: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @classmethod
    def create(
        cls,
        capacity: int,
        top_k: int,
        hidden_size: int,
        fmt: StageFormat,
        device: torch.device | str = "cpu",
        *,
        guard_bytes: int = 0,
    ) -> StagingWorkspace:
        for name, value, lo in (("capacity", capacity, 1), ("top_k", top_k, 1),
                                ("hidden_size", hidden_size, 32)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(name, f"an int >= {lo}", repr(value))
        if hidden_size % 32 != 0:
            raise ConfigError("hidden_size", "a multiple of 32", hidden_size)
        if guard_bytes < 0 or guard_bytes % REGION_ALIGN != 0:
            raise ConfigError("guard_bytes", f"a multiple of {REGION_ALIGN} >= 0", guard_bytes)
        specs: list[tuple[str, torch.dtype, tuple]] = [
            ("ids", torch.int32, (capacity, top_k)),
            ("scores", torch.float32, (capacity, top_k)),
            ("payload", *payload_spec(fmt, capacity, hidden_size)),
        ]
        sc = scale_spec(fmt, capacity, hidden_size)
        if sc is not None:
            specs.append(("scales", *sc))
        specs += [
            ("row_code", torch.int32, (capacity,)),
            ("bad_id", torch.int64, (capacity,)),
            ("bad_score", torch.float64, (capacity,)),
            ("status", torch.int32, (1,)),
        ]
        regions, nbytes = pack_regions(specs, guard_bytes)
        buffer = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        ws = cls(capacity, top_k, hidden_size, fmt, buffer, regions, guard_bytes)
        for name, r in regions.items():
            ws._views[name] = buffer[r.offset : r.offset + r.nbytes].view(r.dtype).view(r.shape)
        return ws

    def view(self, name: str) -> torch.Tensor:
        """The typed view of region ``name``."""
        return self._views[name]

    @property
    def ids(self) -> torch.Tensor:
        return self._views["ids"]

    @property
    def scores(self) -> torch.Tensor:
        return self._views["scores"]

    @property
    def payload(self) -> torch.Tensor:
        return self._views["payload"]

    @property
    def scales(self) -> torch.Tensor | None:
        return self._views.get("scales")

    @property
    def device(self) -> torch.device:
        return self.buffer.device

    def region_mask(self) -> torch.Tensor:
        """Bool mask over the buffer bytes: True inside a region (may be written)."""
        return region_mask(self.regions.values(), self.buffer.numel(), self.buffer.device)
