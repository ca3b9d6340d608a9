"""Time the oracle's forward: ``moe_forward`` and ``ep_forward`` (issue 3, Performance).

Shape: T=1024 tokens, H=2048, I=1024, E=64, K=8, recipe ``bf16``. Prints the best of N wall
times of the single-rank ``moe_forward`` and of ``ep_forward`` with P=8 (the same 1024 tokens
split into 8 ranks of 128), their ratio, whether the EP outputs equal the single-rank ones
bit for bit, and a JSON summary.

Goals: ``moe_forward`` under 30 s on the CPU machine (under 1 s on a GPU) and ``ep_forward``
at most 2x ``moe_forward``. Exits 1 when a goal is missed or the outputs differ.

Usage: ``python -m oracle.bench_forward [--device cpu|cuda] [--repeats N] [--threads N]
[--tokens T]``. CPU runs use one thread by default (the CI machine is small and shared;
oversubscribed OpenMP threads make timings meaningless); ``--tokens`` shrinks the case for
a smoke run (the time goals apply to 1024 tokens only).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

from oracle.collective import ep_forward
from oracle.experts import MoEConfig, moe_forward, prepare_weights

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K, WORLD = 1024, 2048, 1024, 64, 8, 8
RECIPE = "bf16"
BUDGET_S = {"cpu": 30.0, "cuda": 1.0}
MAX_EP_RATIO = 2.0


def _best_time(
    fn: Callable[[], object], repeats: int, device: torch.device
) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best, result


def _make_case(tokens: int, device: torch.device):
    g = torch.Generator().manual_seed(0)
    config = MoEConfig(RECIPE, EXPERTS, TOP_K, HIDDEN, INTERMEDIATE)
    # bf16 weights built expert by expert (float32 for all experts would need 1.5 GiB).
    w13 = torch.empty((EXPERTS, 2 * INTERMEDIATE, HIDDEN), dtype=torch.bfloat16)
    w2 = torch.empty((EXPERTS, HIDDEN, INTERMEDIATE), dtype=torch.bfloat16)
    for e in range(EXPERTS):
        w13[e] = torch.randn(2 * INTERMEDIATE, HIDDEN, generator=g) * HIDDEN**-0.5
        w2[e] = torch.randn(HIDDEN, INTERMEDIATE, generator=g) * INTERMEDIATE**-0.5
    weights = prepare_weights(w13.to(device), w2.to(device), config)
    hidden = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    ids = torch.rand(tokens, EXPERTS, generator=g).argsort(dim=1)[:, :TOP_K]
    scores = torch.softmax(torch.randn(tokens, TOP_K, generator=g), dim=1)
    return config, weights, hidden.to(device), ids.to(device), scores.to(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1; 0: torch's default)"
    )
    parser.add_argument("--tokens", type=int, default=TOKENS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tokens % WORLD:
        parser.error(f"--tokens must be a multiple of {WORLD}")
    device = torch.device(args.device)
    config, weights, hidden, ids, scores = _make_case(args.tokens, device)
    per_rank = args.tokens // WORLD
    ranks = [
        (
            hidden[r * per_rank : (r + 1) * per_rank],
            ids[r * per_rank : (r + 1) * per_rank],
            scores[r * per_rank : (r + 1) * per_rank],
        )
        for r in range(WORLD)
    ]
    t_moe, out = _best_time(
        lambda: moe_forward(hidden, ids, scores, weights, config), args.repeats, device
    )
    t_ep, outs = _best_time(lambda: ep_forward(ranks, weights, config, WORLD), args.repeats, device)
    same = torch.equal(torch.cat(outs).view(torch.int16), out.view(torch.int16))
    ratio = t_ep / t_moe
    budget = BUDGET_S[device.type]
    shape = f"T={args.tokens} H={HIDDEN} I={INTERMEDIATE} E={EXPERTS} K={TOP_K}"
    print(
        f"{RECIPE} {shape} on {device} ({torch.get_num_threads()} threads), best of {args.repeats}"
    )
    print(
        f"  moe_forward        {t_moe:8.3f} s   goal < {budget} s   "
        f"{'ok' if t_moe < budget else 'OVER'}"
    )
    print(
        f"  ep_forward P={WORLD}    {t_ep:8.3f} s   ratio {ratio:.2f}x (goal <= {MAX_EP_RATIO}x)   "
        f"{'ok' if ratio <= MAX_EP_RATIO else 'OVER'}"
    )
    print(f"  ep_forward == moe_forward bitwise: {same}")
    print(
        json.dumps(
            {
                "recipe": RECIPE,
                "tokens": args.tokens,
                "hidden": HIDDEN,
                "intermediate": INTERMEDIATE,
                "experts": EXPERTS,
                "top_k": TOP_K,
                "world_size": WORLD,
                "device": str(device),
                "threads": torch.get_num_threads(),
                "moe_forward_s": t_moe,
                "ep_forward_s": t_ep,
                "ep_ratio": ratio,
                "budget_s": budget,
                "bitwise_equal": same,
            }
        )
    )
    full = args.tokens == TOKENS
    ok = same and ratio <= MAX_EP_RATIO and (t_moe < budget or not full)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
