"""Golden byte vectors (fixtures/golden, made by fixtures/make_golden.py) and their checkers.

Each ``check_*`` runs a format function over one golden file and returns the
list of mismatches (empty when every byte agrees). The functions under test
are parameters so the planted-bug tests can hand in broken variants and see
that the checkers report them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch

GOLDEN = Path(__file__).resolve().parents[3] / "fixtures" / "golden"

Mismatch = tuple[str, str, object, object]  # (case, field, expected, actual)


@cache
def load(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def f32_from_hex(values: list[str]) -> torch.Tensor:
    bits = [int(v, 16) for v in values]
    signed = [b - (1 << 32) if b >= 1 << 31 else b for b in bits]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def _bytes(t: torch.Tensor) -> list[int]:
    return t.contiguous().view(torch.uint8).flatten().tolist()


def _diff(case: str, field: str, expected: list[int], actual: list[int]) -> list[Mismatch]:
    if expected == actual:
        return []
    return [(case, field, expected, actual)]


def check_casts(fmt: str, cast: Callable[[torch.Tensor], torch.Tensor]) -> list[Mismatch]:
    """``cast`` maps a float32 tensor to float8 (e4m3/e5m2) or to uint8 E2M1 codes."""
    cases = load("casts.json")[fmt]
    x = f32_from_hex([c[1] for c in cases])
    got = _bytes(cast(x))
    return [
        (f"{kind} {hx}", "byte", exp, act)
        for (kind, hx, exp), act in zip(cases, got, strict=True)
        if exp != act
    ]


def check_e8m0(decode: Callable[[torch.Tensor], torch.Tensor]) -> list[Mismatch]:
    cases = load("e8m0.json")["cases"]
    got = decode(torch.tensor([c[0] for c in cases], dtype=torch.uint8))
    out: list[Mismatch] = []
    for (b, hx), v in zip(cases, got.tolist(), strict=True):
        if hx == "nan":
            if v == v:  # not NaN
                out.append((str(b), "value", "nan", v))
        else:
            bits = got[b : b + 1].view(torch.int32).item() & 0xFFFFFFFF
            if bits != int(hx, 16):
                out.append((str(b), "bits", hx, f"0x{bits:08x}"))
    return out


def check_mx(
    file: str, group: str, quantize: Callable[[torch.Tensor, str], tuple[torch.Tensor, torch.Tensor]]
) -> list[Mismatch]:
    """``quantize(x [1, K] float32, mode) -> (payload, scale_bytes)``; payload compared as bytes."""
    out: list[Mismatch] = []
    for c in load(file)[group]:
        x = f32_from_hex(c["x"]).reshape(1, -1)
        payload, scale = quantize(x, c["mode"])
        name = f"{c['name']}/{c['mode']}"
        out += _diff(name, "scale", c["scale"], _bytes(scale))
        out += _diff(name, "payload", c["payload"], _bytes(payload))
    return out


def check_nvfp4(
    quantize: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> list[Mismatch]:
    """``quantize(x [1, K] float32, g float32 [1, 1]) -> (packed, scales)``."""
    out: list[Mismatch] = []
    for c in load("nvfp4.json")["cases"]:
        x = f32_from_hex(c["x"]).reshape(1, -1)
        g = f32_from_hex([c["global_scale"]]).reshape(1, 1)
        packed, scales = quantize(x, g)
        out += _diff(c["name"], "scales", c["scales"], _bytes(scales))
        out += _diff(c["name"], "packed", c["packed"], _bytes(packed))
    return out


def check_safe_fp8(quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> list[Mismatch]:
    """All golden rows quantized as one ``[T, H]`` batch (rows are independent)."""
    cases = load("safe_fp8.json")["cases"]
    x = torch.stack([f32_from_hex(c["x"]) for c in cases])
    payload, d = quantize(x)
    out: list[Mismatch] = []
    got_d = d.view(torch.int32).tolist()
    for i, c in enumerate(cases):
        out += _diff(c["name"], "d", [int(c["d"], 16)], [got_d[i] & 0xFFFFFFFF])
        out += _diff(c["name"], "payload", c["payload"], _bytes(payload[i]))
    return out


def check_fp8_block(quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
                    ) -> list[Mismatch]:
    """``quantize(x [n, 128] float32) -> (payload [n, 128], d [n, 1])``: every golden block as
    one row (blocks are independent); d compared by its float32 bits (NaN: 0x7FC00000)."""
    cases = load("fp8_block.json")["cases"]
    x = torch.stack([f32_from_hex(c["x"]) for c in cases])
    payload, d = quantize(x)
    got_d = d.reshape(-1).view(torch.int32).tolist()
    out: list[Mismatch] = []
    for i, c in enumerate(cases):
        out += _diff(c["name"], "d", [int(c["d"], 16)], [got_d[i] & 0xFFFFFFFF])
        out += _diff(c["name"], "payload", c["payload"], _bytes(payload[i]))
    return out
