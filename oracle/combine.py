"""Masked combine of per-slot expert terms (docs/contract.md s6).

Pure PyTorch, any device, bitwise-defined: kernels must match it byte for byte given
identical terms (docs/contract.md s8).
"""

from __future__ import annotations

import torch

from oracle.routing import ID_DTYPES, MASKED_ID


def _bad(argument: str, expected: object, actual: object) -> ValueError:
    return ValueError(f"{argument}: expected {expected}, got {actual}")


def masked_combine(terms: torch.Tensor, topk_ids: torch.Tensor,
                   scores: torch.Tensor | None = None) -> torch.Tensor:
    """``out[t] = bf16(sum over active k = 0..K-1 of float32(terms[t, k]))`` (docs/contract.md s6).

    - ``terms``: bf16 ``[T, K, H]``; ``topk_ids``: int32/int64 ``[T, K]``; slot ``(t, k)`` is
      masked iff ``topk_ids[t, k] == -1`` (routes are assumed to have passed the s2 checks).
    - The accumulator of each row starts at ``+0.0`` in float32; active slots are added one
      after another in slot order ``k = 0, 1, ..., K-1``, each addition one IEEE float32
      addition rounded to nearest even; the result is rounded once to bf16 (nearest even).
    - Masked slots contribute nothing: their terms are never read into the sum, so NaN/Inf
      behind them cannot leak, and a row with no active slot is exactly ``+0.0`` in every
      column. (Consequence of the ``+0.0`` start: a row whose active terms are all ``-0.0``
      yields ``+0.0``.)

    - ``scores`` (combine weighting, docs/contract.md s12.combine-weighting): float32 staged
      scores ``[T, K]``; each active term is first multiplied by its score, one float32
      multiplication (``float32(score * float32(term))``), then added as above.

    Returns a new contiguous bf16 ``[T, H]`` tensor on the inputs' device. Inputs may have any
    strides and are never written. Raises ``ValueError`` naming the argument on bad metadata.
    """
    if not isinstance(terms, torch.Tensor):
        raise _bad("terms", "a torch.Tensor", type(terms).__name__)
    if not isinstance(topk_ids, torch.Tensor):
        raise _bad("topk_ids", "a torch.Tensor", type(topk_ids).__name__)
    if terms.dtype != torch.bfloat16:
        raise _bad("terms", "dtype torch.bfloat16", terms.dtype)
    if terms.dim() != 3:
        raise _bad("terms", "a 3-D tensor [T, K, H]", f"shape {tuple(terms.shape)}")
    if topk_ids.dtype not in ID_DTYPES:
        raise _bad("topk_ids", "dtype int32 or int64", topk_ids.dtype)
    if topk_ids.shape != terms.shape[:2]:
        raise _bad(
            "topk_ids",
            f"shape {tuple(terms.shape[:2])} (terms.shape[:2], [T, K])",
            f"shape {tuple(topk_ids.shape)}",
        )
    if topk_ids.device != terms.device:
        raise _bad("topk_ids", f"device {terms.device} (that of terms)", topk_ids.device)
    if scores is not None and (not isinstance(scores, torch.Tensor)
                               or scores.dtype != torch.float32
                               or scores.shape != topk_ids.shape
                               or scores.device != terms.device):
        got = (f"{scores.dtype} {tuple(scores.shape)} on {scores.device}"
               if isinstance(scores, torch.Tensor) else type(scores).__name__)
        raise _bad("scores", f"None or float32 {tuple(topk_ids.shape)} on {terms.device} "
                   "(staged scores)", got)
    num_tokens, top_k, hidden = terms.shape
    active = (topk_ids != MASKED_ID).unsqueeze(-1)  # [T, K, 1]
    acc = torch.zeros((num_tokens, hidden), dtype=torch.float32, device=terms.device)
    for k in range(top_k):
        # where(active, acc + term, acc): a masked slot leaves acc untouched (not "acc + 0",
        # which would also turn an accumulated -0.0 into +0.0 and let NaN in via 0 * NaN).
        term = terms[:, k].to(torch.float32)
        if scores is not None:
            term = scores[:, k : k + 1] * term
        acc = torch.where(active[:, k], acc + term, acc)
    return acc.to(torch.bfloat16)
