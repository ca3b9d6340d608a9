"""``layer_flashinfer_cake``: our bf16 layer against FlashInfer's sm90 MegaMoE
``bf16_bf16_bf16_push_cake`` on the same rows (issue 39 item 4), both at EP1 with late
weighting (the cake applies the score after FC2 or in its combine, never before A2), both
behind the backend interface (``megamoe.bench.backend_layer``), both checked against the
oracle before timing.

FlashInfer's layer runs as a remote arm (``megamoe.bench.remote``): built, warmed up, captured
and timed in a worker process of its own, with every request bounded, because one of its
layers beside ours in one process once left the GPU machine unanswering and its kernels spin
on flags. The worker finds FlashInfer through ``MEGAMOE_FLASHINFER_ROOT`` or the installed
``flashinfer-python`` (``megamoe.backends.flashinfer_loader``); its first build JIT-compiles
the cake (about 145 s on the H200), inside the request bound.

Cases: the ``layer`` benchmark's DeepSeek-like ones (H = 7168, I = 2048, E = 256, K = 8; T = 1
to 4096, uniform and skewed routes). The gpt-oss-like shape is not among them: the cake takes
H a multiple of 256 and 2880 is not. ``--quick`` keeps T in {1, 16, 256, 4096}.
"""

from __future__ import annotations

from megamoe.bench.backend_layer import MEGAMOE_LATE
from megamoe.bench.benchmarks.layer import _cases
from megamoe.bench.registry import Arm, Benchmark, register_benchmark
from megamoe.bench.remote import RemoteSpec, remote_arm

FLASHINFER_CAKE = RemoteSpec("megamoe.bench.backend_layer:FLASHINFER_CAKE_LATE")

LAYER_FLASHINFER_CAKE = register_benchmark(
    Benchmark(
        name="layer_flashinfer_cake",
        description="the bf16 layer vs FlashInfer's sm90 push cake (EP1, late weighting; "
                    "FlashInfer in a worker process)",
        cases=tuple(c for c in _cases() if c.name.startswith("deepseek-")),
        candidate=Arm("layer-late", MEGAMOE_LATE),
        baselines=(remote_arm("flashinfer-sm90-cake", FLASHINFER_CAKE),),
        ceilings=("copy_bw", "bf16_mm"),
    )
)
