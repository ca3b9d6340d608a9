"""Benchmark harness (DESIGN.md "Measuring"; protocol of seed 001).

Declare a benchmark with :class:`Benchmark` (cases, candidate, baselines,
ceilings) in a module under ``megamoe/bench/benchmarks/`` and
:func:`register_benchmark` it; run it with ``python -m megamoe.bench <name>``
(``./run_tests.sh bench <name>``). A run measures its ceilings, compares the
candidate with each baseline in AB/BA pairs over rounds, runs an A/A control,
and writes ``<name>.json`` (every sample), ``<name>.md`` and two PNG plots.
Everything device-specific sits behind :class:`Backend`
(:class:`CudaBackend`, or :class:`HostBackend` with a real or fake clock).
"""

from megamoe.bench.device import Backend, CudaBackend, HostBackend, ManualClock, default_backend
from megamoe.bench.measure import Measurer, RoundData
from megamoe.bench.protocol import FULL, L2_FLUSH_BYTES, QUICK, Protocol, abba_order, abba_schedule
from megamoe.bench.ranks import DistributedRanks, EmulatedRanks, RankGroup, SingleRank
from megamoe.bench.records import validate_record, write_json
from megamoe.bench.registry import (
    CEILING_NAMES,
    Arm,
    Benchmark,
    BuildContext,
    Case,
    Workload,
    get_benchmark,
    load_benchmarks,
    register_benchmark,
    unregister_benchmark,
)
from megamoe.bench.runner import SCHEMA, run_benchmark

__all__ = [
    "CEILING_NAMES",
    "FULL",
    "L2_FLUSH_BYTES",
    "QUICK",
    "SCHEMA",
    "Arm",
    "Backend",
    "Benchmark",
    "BuildContext",
    "Case",
    "CudaBackend",
    "DistributedRanks",
    "EmulatedRanks",
    "HostBackend",
    "ManualClock",
    "Measurer",
    "Protocol",
    "RankGroup",
    "RoundData",
    "SingleRank",
    "Workload",
    "abba_order",
    "abba_schedule",
    "default_backend",
    "get_benchmark",
    "load_benchmarks",
    "register_benchmark",
    "run_benchmark",
    "unregister_benchmark",
    "validate_record",
    "write_json",
]
