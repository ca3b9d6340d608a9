"""Our layer against FlashInfer's sm90 MegaMoE on the same rows (issue 39 item 4), both at EP1,
both behind the backend interface (``megamoe.bench.backend_layer``), both checked against the
oracle (each in its recipe) before timing:

- ``layer_flashinfer_cake``: bf16, our layer against ``bf16_bf16_bf16_push_cake``, with late
  weighting (the cake applies the score after FC2 or in its combine, never before A2);
- ``layer_flashinfer_fp8``: FP8 against FP8 with other scale blocks: our ``mxfp8`` layer (E4M3
  with 1 x 32 power-of-two scales on activations and weights) against
  ``fp8_fp8_bf16_pull_cutedsl`` in its blockwise mode (recipe ``fp8_block_fi``: 1 x 128 float32
  scales on A1, 1 x 64 on A2, 128 x 128 weight tiles), early weighting; each arm is checked
  against the oracle in its own recipe. The arms do the same GEMM work
  at the same precision, not the same arithmetic; the ratio says which FP8 layer is faster on
  these shapes, not which kernel is better at one recipe. FlashInfer's arm needs CuTe DSL 4.6.2 or
  newer, which cannot share a process with ours: its worker puts ``$MEGAMOE_FLASHINFER_DSL_PATH``
  (the site of that CuTe DSL) first on its ``PYTHONPATH``.

FlashInfer's layer runs as a remote arm (``megamoe.bench.remote``): built, warmed up, captured
and timed in a worker process of its own, with every request bounded, because one of its
layers beside ours in one process once left the GPU machine unanswering and its kernels spin
on flags. The worker finds FlashInfer through ``MEGAMOE_FLASHINFER_ROOT`` or the installed
``flashinfer-python`` (``megamoe.backends.flashinfer_loader``); its first build JIT-compiles
the cake (about 145 s on the H200), inside the request bound.

Cases: the ``layer`` benchmark's DeepSeek-like ones (H = 7168, I = 2048, E = 256, K = 8; T = 1
to 4096, uniform and skewed routes), and the same with E = 32 (``dsrank-*``: one rank's experts
at EP8, small beside the whole layer's 21 GiB of weights a process: docs/perf.md). The
gpt-oss-like shape is not among them: the cake takes H a multiple of 256 and the pull backend
multiples of 128, and 2880 is neither. ``--quick`` keeps T in {1, 16, 256, 4096}.
"""

from __future__ import annotations

from megamoe.bench.backend_layer import MEGAMOE_LATE, MEGAMOE_MXFP8
from megamoe.bench.benchmarks.layer import DEEPSEEK, DEEPSEEK_RANK, _cases
from megamoe.bench.registry import Arm, Benchmark, register_benchmark
from megamoe.bench.remote import RemoteSpec, remote_arm

FLASHINFER_CAKE = RemoteSpec("megamoe.bench.backend_layer:FLASHINFER_CAKE_LATE")
FLASHINFER_FP8_PULL = RemoteSpec("megamoe.bench.backend_layer:FLASHINFER_FP8_PULL",
                                 env={"PYTHONPATH": "${MEGAMOE_FLASHINFER_DSL_PATH}"})
DEEPSEEK_CASES = _cases((DEEPSEEK, DEEPSEEK_RANK), quick_shapes=(DEEPSEEK, DEEPSEEK_RANK))
"""The whole DeepSeek-like layer (21 GiB of bf16 weights; FlashInfer's worker drops its shared
copy once built, ``backend_layer.after_build``, so by count it fits an H100, not yet run) and
one rank's share of it at EP8 (``dsrank``: 32 experts, ran on an H100)."""


ARM_RECIPES: dict[str, str] = {"layer-late": "bf16", "flashinfer-sm90-cake": "bf16",
                               "layer-mxfp8": "mxfp8", "flashinfer-sm90-fp8-pull": "fp8_block_fi"}
"""Each side-by-side arm's recipe: its weight bytes per weight and the matmul ceiling its FLOPs
are read against (``backend_layer.RECIPE_WORK``; ``devtools.roofline`` reads it)."""


def _side_by_side(name: str, description: str, ours: Arm, theirs: Arm,
                  matmul: str) -> Benchmark:
    """Our arm against FlashInfer's remote arm on the DeepSeek-like cases, read against the
    copy ceiling and the ``matmul`` rate of their recipe."""
    return register_benchmark(Benchmark(name=name, description=description, cases=DEEPSEEK_CASES,
                                        candidate=ours, baselines=(theirs,),
                                        ceilings=("copy_bw", matmul)))


LAYER_FLASHINFER_CAKE = _side_by_side(
    "layer_flashinfer_cake",
    "the bf16 layer vs FlashInfer's sm90 push cake (EP1, late weighting; FlashInfer in a "
    "worker process)",
    Arm("layer-late", MEGAMOE_LATE), remote_arm("flashinfer-sm90-cake", FLASHINFER_CAKE),
    "bf16_mm")
LAYER_FLASHINFER_FP8 = _side_by_side(
    "layer_flashinfer_fp8",
    "the mxfp8 layer vs FlashInfer's sm90 FP8 pull layer (fp8_block; EP1, early weighting; "
    "FlashInfer in a worker with its CuTe DSL)",
    Arm("layer-mxfp8", MEGAMOE_MXFP8), remote_arm("flashinfer-sm90-fp8-pull", FLASHINFER_FP8_PULL),
    "fp8_mm")
