"""Declarations: a benchmark is a frozen :class:`Benchmark` registered by name.

A benchmark declares its cases (shapes, routing scenario, seed), its
candidate arm, its baseline arms and the ceilings its results are compared
with. Arms are builders: ``build(case, ctx) -> Workload`` allocates the
inputs for one rank and returns the function to time plus the bytes and
FLOPs it must move or do (each input read once, each output written once),
so results can be reported as a fraction of a ceiling measured in the same run.

Modules under ``megamoe/bench/benchmarks/`` are imported by
:func:`load_benchmarks`, so a new benchmark is one module that calls
:func:`register_benchmark`.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from megamoe.bench.protocol import CACHE_MODES

DEVICE_CEILINGS = ("copy_bw", "bf16_mm", "fp8_mm")
"""Ceilings of one device (every rank measures its own; a benchmark's default)."""
CEILING_NAMES = (*DEVICE_CEILINGS, "peer_copy_bw")
"""Ceilings the harness can measure (see ``megamoe.bench.ceilings``); ``peer_copy_bw`` needs
an EP world (``megamoe.bench.ep_world``)."""
CEILING_WORK = {"copy_bw": "bytes_moved", "peer_copy_bw": "bytes_sent", "bf16_mm": "flops",
                "fp8_mm": "flops"}
"""The ``Workload`` field each ceiling's rate divides: achieved = work / time."""


@dataclass(frozen=True)
class Case:
    """One shape of a benchmark. ``shape`` and ``scenario`` go into the records verbatim.

    ``quick`` marks the cases a ``--quick`` run keeps; ``caches`` limits the
    cache modes (default: whatever the protocol asks for);
    ``calls_per_sample`` overrides the protocol's for this case (short
    kernels need more calls per sample than the event timer's resolution).
    """

    name: str
    shape: Mapping[str, int] = field(default_factory=dict)
    scenario: str | None = None
    seed: int = 0
    quick: bool = False
    caches: tuple[str, ...] = CACHE_MODES
    calls_per_sample: int | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"name: expected a non-empty string, got {self.name!r}")
        object.__setattr__(self, "shape", MappingProxyType(dict(self.shape)))
        if not self.caches or any(c not in CACHE_MODES for c in self.caches):
            raise ValueError(f"caches: expected a non-empty subset of {CACHE_MODES}, got {self.caches!r}")
        n = self.calls_per_sample
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"calls_per_sample: expected None or a positive int, got {n!r}")


@dataclass(frozen=True)
class BuildContext:
    """What a builder gets: the device, the logical rank and world size, the seed."""

    device: torch.device
    rank: int
    world_size: int
    seed: int

    def generator(self) -> torch.Generator:
        """A generator on ``device`` seeded from the case seed and the rank."""
        g = torch.Generator(device=self.device)
        g.manual_seed(self.seed * 1_000_003 + self.rank)
        return g


@dataclass(frozen=True)
class Workload:
    """The function to time on one rank, and the work it must do per call.

    ``bytes_moved``: fewest bytes through device memory per call (reads plus
    writes). ``flops``: arithmetic per call. ``bytes_sent``: bytes this rank writes into
    the ranks' receive buffers per call, its own included (exchange arms). ``ceiling``: which
    measured ceiling the achieved rate is compared with (one of ``CEILING_NAMES``), or None.
    ``check``: run once after warmup and before capture (untimed); it raises when the
    warmed-up output is wrong, so nothing wrong is timed. ``remote``: a
    ``megamoe.bench.remote.RemoteWorker`` when the workload lives in a worker process (the
    measurer prepares and times it there; ``fn`` is not called here).
    """

    fn: Callable[[], object]
    bytes_moved: int = 0
    flops: int = 0
    ceiling: str | None = None
    check: Callable[[], None] | None = None
    bytes_sent: int = 0
    remote: Any = None

    def __post_init__(self) -> None:
        if self.ceiling is not None and self.ceiling not in CEILING_NAMES:
            raise ValueError(f"ceiling: expected one of {CEILING_NAMES} or None, got {self.ceiling!r}")
        if self.ceiling is not None and self.work() <= 0:
            field_name = CEILING_WORK[self.ceiling]
            raise ValueError(f"{field_name}: expected > 0 for a workload compared with "
                             f"{self.ceiling}")

    def work(self) -> int:
        """The work its ceiling's rate counts (``CEILING_WORK``); 0 without a ceiling."""
        return 0 if self.ceiling is None else int(getattr(self, CEILING_WORK[self.ceiling]))


Builder = Callable[[Case, BuildContext], Workload]


@dataclass(frozen=True)
class Arm:
    """An implementation under test: a name and a builder."""

    name: str
    build: Builder


@dataclass(frozen=True)
class Benchmark:
    """A named benchmark: cases, the candidate, baselines, ceilings.

    Every case compares the candidate with each baseline (AB/BA) and, when the
    protocol asks for it, with a second independent build of itself (A/A).
    """

    name: str
    description: str
    cases: tuple[Case, ...]
    candidate: Arm
    baselines: tuple[Arm, ...] = ()
    ceilings: tuple[str, ...] = DEVICE_CEILINGS
    graph: bool = True
    """False when an arm cannot be captured in a CUDA graph (host syncs, host collectives):
    every run of the benchmark then times eager loops, as ``--no-graph`` does."""

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"name: expected a non-empty name without spaces, got {self.name!r}")
        if not self.cases:
            raise ValueError("cases: expected at least one case, got none")
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError(f"cases: expected unique case names, got {names}")
        arms = [self.candidate.name, *(b.name for b in self.baselines)]
        if len(set(arms)) != len(arms):
            raise ValueError(f"baselines: expected arm names distinct from each other and the candidate, got {arms}")
        if any(c not in CEILING_NAMES for c in self.ceilings):
            raise ValueError(f"ceilings: expected names from {CEILING_NAMES}, got {self.ceilings!r}")

    def cases_for(self, quick: bool, patterns: Sequence[str] = ()) -> tuple[Case, ...]:
        """All cases, or the ``quick`` ones (all of them when none is marked quick), then
        only those whose name matches one of the shell-style ``patterns`` (if any).
        A pattern that matches no case is an error (a typo must not silently run nothing).
        """
        chosen = self.cases
        if quick:
            chosen = tuple(c for c in self.cases if c.quick) or self.cases
        if not patterns:
            return chosen
        for pat in patterns:
            if not any(fnmatch.fnmatchcase(c.name, pat) for c in chosen):
                raise ValueError(
                    f"case: pattern {pat!r} matches none of the {len(chosen)} cases of "
                    f"{self.name!r}{' (--quick)' if quick else ''}"
                )
        return tuple(c for c in chosen if any(fnmatch.fnmatchcase(c.name, p) for p in patterns))


_REGISTRY: dict[str, Benchmark] = {}

BENCHMARKS_PACKAGE = "megamoe.bench.benchmarks"


def register_benchmark(item: Any) -> Any:
    """Register a :class:`Benchmark`, or decorate a no-argument function returning one.

    Returns ``item`` unchanged. A name registered twice by different
    declarations is an error (re-importing the same module is fine).
    """
    bench = item() if callable(item) and not isinstance(item, Benchmark) else item
    if not isinstance(bench, Benchmark):
        raise ValueError(f"item: expected a Benchmark or a function returning one, got {type(bench).__name__}")
    existing = _REGISTRY.get(bench.name)
    if existing is not None and existing != bench:
        same_origin = getattr(existing.candidate.build, "__qualname__", None) == getattr(
            bench.candidate.build, "__qualname__", object()
        )
        if not same_origin:
            raise ValueError(f"name: benchmark {bench.name!r} registered twice")
    _REGISTRY[bench.name] = bench
    return item


def unregister_benchmark(name: str) -> None:
    """Remove ``name`` (tests that register throw-away benchmarks clean up with this)."""
    _REGISTRY.pop(name, None)


def load_benchmarks() -> dict[str, Benchmark]:
    """Import every module of ``megamoe.bench.benchmarks``; return name -> benchmark."""
    package = importlib.import_module(BENCHMARKS_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__, prefix=BENCHMARKS_PACKAGE + "."):
        importlib.import_module(info.name)
    return dict(sorted(_REGISTRY.items()))


def get_benchmark(name: str) -> Benchmark:
    """The registered benchmark ``name`` (after :func:`load_benchmarks`)."""
    benches = load_benchmarks()
    if name not in benches:
        raise ValueError(f"name: expected one of {sorted(benches)}, got {name!r}")
    return benches[name]
