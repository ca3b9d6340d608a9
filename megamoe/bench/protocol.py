"""The timing protocol of a benchmark run (DESIGN.md "Measuring").

A run compares two arms with alternating AB/BA pairs over several rounds
(seed 001: three rounds of twenty pairs), runs an A/A control (the candidate
against a second, independent build of itself) to show the noise floor, and
keeps every sample. :class:`Protocol` holds the numbers; :func:`abba_schedule`
holds the order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

L2_FLUSH_BYTES = 512 * 2**20
"""Bytes written between samples for cold-cache numbers (larger than any Hopper L2)."""

CACHE_MODES = ("warm", "cold")

Order = tuple[int, int]


def _positive_int(argument: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{argument}: expected a positive int, got {value!r}")


@dataclass(frozen=True)
class Protocol:
    """How samples are taken and judged. Validated at construction.

    rounds, pairs: each comparison takes ``rounds * pairs`` samples per arm,
        one per arm per pair, in the order of :func:`abba_schedule`.
    warmup: untimed calls of every workload before capture and timing.
    calls_per_sample: calls per timed sample (captured in one CUDA graph when
        ``graph``); a sample is the time per call.
    caches: which of ``"warm"`` and ``"cold"`` (L2 flushed by a
        ``flush_bytes`` write before every sample, outside the timed region).
    aa_control: also compare the candidate with an independent build of itself.
    resolution: the smallest relative difference the A/A control may show and
        still be called noise; a difference between real arms is judged
        against the measured A/A floor instead.
    confidence: confidence level of the distribution-free interval for the
        median pair gain.
    """

    rounds: int = 3
    pairs: int = 20
    warmup: int = 10
    calls_per_sample: int = 5
    graph: bool = True
    caches: tuple[str, ...] = CACHE_MODES
    aa_control: bool = True
    resolution: float = 0.005
    confidence: float = 0.95
    flush_bytes: int = L2_FLUSH_BYTES

    def __post_init__(self) -> None:
        for name in ("rounds", "pairs", "calls_per_sample", "flush_bytes"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup: expected an int >= 0, got {self.warmup!r}")
        if not self.caches or any(c not in CACHE_MODES for c in self.caches):
            raise ValueError(f"caches: expected a non-empty subset of {CACHE_MODES}, got {self.caches!r}")
        if len(set(self.caches)) != len(self.caches):
            raise ValueError(f"caches: expected no repeats, got {self.caches!r}")
        if not 0.0 <= self.resolution < 1.0:
            raise ValueError(f"resolution: expected 0 <= resolution < 1, got {self.resolution!r}")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"confidence: expected 0.5 <= confidence < 1, got {self.confidence!r}")

    @property
    def samples_per_arm(self) -> int:
        """Samples each arm of one comparison contributes (all retained)."""
        return self.rounds * self.pairs

    def with_(self, **changes: object) -> Protocol:
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)


FULL = Protocol()
QUICK = Protocol(rounds=3, pairs=8, warmup=3)


def abba_order(round_index: int, pair_index: int) -> Order:
    """Arm order of one pair: AB on even ``round + pair``, BA on odd.

    Alternating inside a round cancels a fixed first/second bias; offsetting
    by the round makes each round start with the other order.
    """
    return (0, 1) if (round_index + pair_index) % 2 == 0 else (1, 0)


def abba_schedule(rounds: int, pairs: int) -> tuple[tuple[Order, ...], ...]:
    """The order of every pair of every round (rounds x pairs)."""
    _positive_int("rounds", rounds)
    _positive_int("pairs", pairs)
    return tuple(tuple(abba_order(r, i) for i in range(pairs)) for r in range(rounds))
