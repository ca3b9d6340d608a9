"""Argument checks shared by the format functions.

Every failure is a ``ValueError`` naming the argument, the rule, the expected
and the actual value (COMMON rules; API.md "Bad input").
"""

from __future__ import annotations

import torch


def fail(argument: str, rule: str, expected: object, actual: object) -> ValueError:
    """Build the ValueError for a broken input rule."""
    return ValueError(f"{argument}: {rule} (expected {expected}, got {actual})")


def require_tensor(argument: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise fail(argument, "must be a torch.Tensor", "torch.Tensor", type(value).__name__)
    return value


def require_floating(argument: str, value: object) -> torch.Tensor:
    """A real floating-point tensor (float64/32/16, bfloat16 or float8)."""
    t = require_tensor(argument, value)
    if not t.dtype.is_floating_point:
        raise fail(argument, "dtype must be floating point", "a floating dtype", t.dtype)
    return t


def require_dtype(argument: str, value: object, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    t = require_tensor(argument, value)
    if t.dtype not in dtypes:
        names = " or ".join(str(d) for d in dtypes)
        raise fail(argument, "wrong dtype", names, t.dtype)
    return t


def require_integer(argument: str, value: object) -> torch.Tensor:
    t = require_tensor(argument, value)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise fail(argument, "dtype must be an integer type", "an integer dtype", t.dtype)
    return t


def require_last_dim_multiple(argument: str, t: torch.Tensor, multiple: int, what: str) -> int:
    """The last dim exists and is a multiple of ``multiple``; returns it."""
    if t.dim() < 1:
        raise fail(argument, f"needs a last dim ({what})", "at least 1 dim", f"shape {tuple(t.shape)}")
    k = t.shape[-1]
    if k % multiple != 0:
        raise fail(
            argument,
            f"last dim must be a multiple of {multiple} ({what})",
            f"a multiple of {multiple}",
            f"last dim {k} (shape {tuple(t.shape)})",
        )
    return k


def require_choice(argument: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise fail(argument, "unknown value", " or ".join(repr(c) for c in choices), repr(value))
    return value  # type: ignore[return-value]


def require_scale_columns(
    argument: str, scales: torch.Tensor, lead_shape: tuple[int, ...], needed: int
) -> None:
    """``scales`` is ``[*lead_shape, n]`` with ``n >= needed`` (padded columns allowed)."""
    shape = tuple(scales.shape)
    if scales.dim() < 1 or shape[:-1] != lead_shape or shape[-1] < needed:
        raise fail(
            argument,
            "shape must be the payload's leading dims plus at least one scale per block",
            f"[{', '.join(str(s) for s in lead_shape)}{', ' if lead_shape else ''}>={needed}]",
            f"shape {shape}",
        )
