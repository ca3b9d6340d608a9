"""Errors raised by the layer API (CONTRACTS.md section 2)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A metadata check failed (shape, dtype, device, capacity, alignment, limits).

    Raised on the host before any launch. The message names the argument, the
    expected value and the actual value (CONTRACTS.md s2).
    """

    def __init__(self, argument: str, expected: object, actual: object, detail: str = "") -> None:
        self.argument = argument
        self.expected = expected
        self.actual = actual
        msg = f"{argument}: expected {expected}, got {actual}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class RouteError(ValueError):
    """A route value check failed (CONTRACTS.md s2).

    Names the first bad (row, slot, id, score, rule); rule is one of
    ``id_out_of_range``, ``duplicate_id``, ``non_finite_score`` (or
    ``non_finite_input`` for safe-FP8 input rows).
    """

    def __init__(self, row: int, slot: int, expert_id: int, score: float, rule: str) -> None:
        self.row, self.slot, self.expert_id, self.score, self.rule = row, slot, expert_id, score, rule
        super().__init__(
            f"bad route at row {row}, slot {slot}: id={expert_id}, score={score!r} breaks rule {rule!r}"
        )
