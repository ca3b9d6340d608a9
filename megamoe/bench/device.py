"""Timing backends: the only place the benchmark harness touches ``torch.cuda``.

A backend turns a workload function into a timed unit (a captured CUDA graph
of several calls, or a plain loop), times one execution of the unit, flushes
the L2 cache and describes the device. :class:`CudaBackend` times with CUDA
events; :class:`HostBackend` times with a host clock and runs on the CPU,
either really (``time.perf_counter``) or with an injected fake clock such as
:class:`ManualClock`, so the whole harness can be tested without a GPU.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from megamoe.bench.protocol import L2_FLUSH_BYTES
from megamoe.graphs import capture

Unit = Callable[[], None]


class Backend(Protocol):
    """What the measurer needs from a device."""

    kind: str
    device: torch.device

    def synchronize(self) -> None:
        """Wait until all queued device work is done."""

    def prepare(self, fn: Callable[[], object], calls: int, graph: bool) -> Unit:
        """A unit that runs ``fn`` ``calls`` times (captured once when ``graph``)."""

    def time(self, unit: Unit, gate: Callable[[], None] | None = None) -> float:
        """Seconds one execution of ``unit`` takes; ``gate`` runs first, untimed."""

    def flush_l2(self) -> None:
        """Evict the cache by writing ``flush_bytes`` (untimed; queued before the next sample)."""

    def release(self) -> None:
        """Drop captured graphs and cached memory of finished workloads."""

    def describe(self) -> dict[str, Any]:
        """The device: name, capability, memory, clocks as read now."""


class ManualClock:
    """A fake clock for tests: time moves only when :meth:`advance` is called."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"seconds: expected >= 0, got {seconds}")
        self.now += seconds


def _loop(fn: Callable[[], object], calls: int) -> Unit:
    def unit() -> None:
        for _ in range(calls):
            fn()

    return unit


class HostBackend:
    """Synchronous CPU backend timed with a host clock (real or injected).

    ``flush`` replaces the default cache flush (a ``flush_bytes`` write into a
    host buffer); tests inject one that advances a fake clock to prove the
    flush stays outside the timed region.
    """

    kind = "host"

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        flush: Callable[[], None] | None = None,
        flush_bytes: int = 64 * 2**20,
    ) -> None:
        self.device = torch.device("cpu")
        self.clock = clock
        self._flush = flush
        self.flush_bytes = flush_bytes
        self._buffer: torch.Tensor | None = None
        self._flushes = 0

    def synchronize(self) -> None:
        return None

    def prepare(self, fn: Callable[[], object], calls: int, graph: bool) -> Unit:
        return _loop(fn, calls)

    def time(self, unit: Unit, gate: Callable[[], None] | None = None) -> float:
        if gate is not None:
            gate()
        t0 = self.clock()
        unit()
        return self.clock() - t0

    def flush_l2(self) -> None:
        self._flushes += 1
        if self._flush is not None:
            self._flush()
            return
        if self._buffer is None:
            self._buffer = torch.empty(self.flush_bytes, dtype=torch.uint8)
        self._buffer.fill_(self._flushes % 251)

    def release(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        import platform

        return {
            "kind": self.kind,
            "name": platform.processor() or platform.machine(),
            "clock": getattr(self.clock, "__qualname__", type(self.clock).__name__),
            "flush_bytes": self.flush_bytes,
        }


_SMI_FIELDS = (
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "persistence_mode",
    "compute_mode",
)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def physical_gpu_id(index: int) -> str:
    """The id nvidia-smi knows CUDA device ``index`` by (honours ``CUDA_VISIBLE_DEVICES``)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def read_gpu_clocks(index: int) -> dict[str, Any]:
    """Clocks and state of CUDA device ``index`` as read now (pynvml, else nvidia-smi), never set."""
    ident = physical_gpu_id(index)
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            h = (
                pynvml.nvmlDeviceGetHandleByIndex(int(ident))
                if ident.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(ident)
            )
            return {
                "source": "pynvml",
                "id": ident,
                "name": _text(pynvml.nvmlDeviceGetName(h)),
                "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
                "clocks.sm": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "clocks.mem": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "clocks.max.sm": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "clocks.max.mem": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "temperature.gpu": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "power.draw": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "power.limit": pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # fall back to nvidia-smi
        nvml_error = repr(e)
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                f"--id={ident}",
                f"--query-gpu={','.join(_SMI_FIELDS)}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
        values = [v.strip() for v in out.splitlines()[0].split(",")]
        return {"source": "nvidia-smi", "id": ident, **dict(zip(_SMI_FIELDS, values, strict=False))}
    except Exception as e:
        return {"source": None, "error": f"pynvml: {nvml_error}; nvidia-smi: {e!r}"}


class CudaBackend:
    """CUDA events around a captured graph of ``calls`` calls (or an eager loop).

    Warmup happens in the measurer before :meth:`prepare`, so capture sees
    warm allocator pools and compiled kernels. Events are recorded on the
    current stream; ``gate`` (e.g. a collective that aligns ranks) is queued
    before the start event, so it is ordered but never timed.
    """

    kind = "cuda"

    def __init__(self, device: torch.device | None = None, flush_bytes: int = L2_FLUSH_BYTES) -> None:
        if not torch.cuda.is_available():
            raise ValueError("device: expected a CUDA device, got none (torch.cuda.is_available() is False)")
        self.device = device if device is not None else torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(self.device)
        self.flush_bytes = flush_bytes
        self._flush_buffer: torch.Tensor | None = None
        self._flushes = 0
        self._graphs: list[torch.cuda.CUDAGraph] = []
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def prepare(self, fn: Callable[[], object], calls: int, graph: bool) -> Unit:
        if not graph:
            return _loop(fn, calls)
        self.synchronize()
        g = torch.cuda.CUDAGraph()
        with capture(g):
            for _ in range(calls):
                fn()
        self.synchronize()
        self._graphs.append(g)
        return g.replay

    def time(self, unit: Unit, gate: Callable[[], None] | None = None) -> float:
        if gate is not None:
            gate()
        self._start.record()
        unit()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3

    def flush_l2(self) -> None:
        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(self.flush_bytes, dtype=torch.uint8, device=self.device)
        self._flushes += 1
        self._flush_buffer.fill_(self._flushes % 251)

    def release(self) -> None:
        self.synchronize()
        for g in self._graphs:
            g.reset()
        self._graphs.clear()
        torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        p = torch.cuda.get_device_properties(self.device)
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        return {
            "kind": self.kind,
            "name": p.name,
            "capability": f"sm_{p.major}{p.minor}",
            "sm_count": p.multi_processor_count,
            "total_memory_bytes": p.total_memory,
            "l2_bytes": getattr(p, "L2_cache_size", None),
            "index": index,
            "flush_bytes": self.flush_bytes,
            "state": read_gpu_clocks(index),
        }


def default_backend(kind: str, index: int | None = None) -> Backend:
    """``"cuda"`` (CUDA events on device ``index``, default the current one) or ``"cpu"`` (host clock)."""
    if kind == "cuda":
        return CudaBackend(None if index is None else torch.device("cuda", index))
    if kind == "cpu":
        return HostBackend()
    raise ValueError(f"device: expected 'cuda' or 'cpu', got {kind!r}")
