"""Errors raised by the layer API (docs/contract.md section 2)."""

from __future__ import annotations


class CompileDuringCaptureError(RuntimeError):
    """A kernel would be compiled (or a workspace allocated) while a CUDA graph is being
    captured: call the named warmup before capture (docs/contract.md s9)."""


class ConfigError(ValueError):
    """A metadata check failed (shape, dtype, device, capacity, alignment, limits).

    Raised on the host before any launch. The message names the argument, the
    expected value and the actual value (docs/contract.md s2).
    """

    def __init__(self, argument: str, expected: object, actual: object, detail: str = "") -> None:
        self.argument = argument
        self.expected = expected
        self.actual = actual
        msg = f"{argument}: expected {expected}, got {actual}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class RouteError(ValueError):
    """A route value check failed (docs/contract.md s2).

    Names the first bad (row, slot, id, score, rule); rule is one of
    ``id_out_of_range``, ``duplicate_id``, ``non_finite_score`` (or
    ``non_finite_input`` for safe-FP8 input rows).
    """

    def __init__(self, row: int, slot: int, expert_id: int, score: float, rule: str) -> None:
        self.row, self.slot, self.expert_id, self.score, self.rule = row, slot, expert_id, score, rule
        super().__init__(
            f"bad route at row {row}, slot {slot}: id={expert_id}, score={score!r} breaks rule {rule!r}"
        )


class CommTimeoutError(RuntimeError):
    """A cross-rank wait expired (docs/contract.md s7: waits are bounded).

    Names the rank that waited (``rank``), the step of the forward or of the world's setup
    (``step``) and the peer that never arrived (``peer``; -1 when the wait does not know
    which one). Raised on the host: by a host barrier that expires, or after a forward (or
    by ``check_errors()``) when the device-side status word recorded a timeout.
    """

    def __init__(self, rank: int, step: str, peer: int, detail: str = "") -> None:
        self.rank, self.step, self.peer = rank, step, peer
        who = f"peer rank {peer}" if peer >= 0 else "a peer"
        msg = f"rank {rank}: timed out at step {step!r} waiting for {who}"
        super().__init__(f"{msg}: {detail}" if detail else msg)
