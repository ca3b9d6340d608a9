"""Constants shared by the layer's host modules (one definition each)."""

from __future__ import annotations

import torch

BF16_NAN = torch.tensor(0x7FC0, dtype=torch.int16).view(torch.bfloat16)
"""The canonical bf16 NaN (bits ``0x7FC0``): the one NaN the widening permute (both E4M3
NaN bytes) and the safe-FP8 A2 quantizer (a non-finite row) write, on both paths
(docs/contract.md s4)."""
