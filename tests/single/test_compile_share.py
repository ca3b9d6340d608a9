"""Shared compiles on the GPU (``tests.harness.compile_share``, ``qualify.py --share-compiles``):
the layer built in a second process from kernels a first process compiled gives the same
output bits as the layer compiled afresh, and it really was loaded, not compiled.

Three fresh interpreters each build an EP1 layer of the two quantized recipes with the most
kinds of kernels (``SHARED_RECIPES``: staging with its quantizers, scaled GEMMs, the combine)
and run one forward on the same rows: one with sharing on and an empty cache directory (it
compiles and writes every kernel) beside one with sharing off (it compiles as production
does), then one with sharing on and the first one's directory (every compile must be served
by the cache). The outputs must be equal as bytes; the host tests cover the rest of the plugin on the
CPU (``tests/host/test_compile_share.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.harness.compile_share import DSL_CACHE_ENV, SHARE_ENV

ROOT = Path(__file__).resolve().parents[2]
SHARED_RECIPES = ("fp8_mxfp4", "mxfp8")

BUILD_AND_RUN = '''\
import hashlib, json, sys
import torch
import cutlass.cute  # noqa: F401 - the DSL first, so that sharing installs before any compile
from tests.harness import compile_share
from megamoe.layer import LayerConfig, MoELayer
from tests.layer_check import layer_routes, layer_weights
from tests.single.layer_cases import C, E, H, INTER, K
shared = compile_share.install()
dev = torch.device("cuda", 0)
digests = {}
for recipe in sys.argv[1:]:
    w13, w2 = layer_weights(0, E, H, INTER)
    hidden, ids, scores = layer_routes(1, 24, num_experts=E, top_k=K, hidden=H, mask_p=0.25,
                                       device=dev)
    layer = MoELayer(LayerConfig(E, K, H, INTER, C, recipe=recipe), w13, w2, dev)
    out = layer.warmup(hidden, ids, scores)
    torch.cuda.synchronize()
    digests[recipe] = hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
    layer.destroy()
print(json.dumps({"shared": shared, "compiles": compile_share.COUNTER.compiles,
                  "hits": compile_share.COUNTER.hits, "digests": digests}))
'''


def _start(cache: Path, share: bool) -> subprocess.Popen:
    # the checkout first, then whatever path finds the CuTe DSL (the GPU machine's is on
    # PYTHONPATH: replacing it failed this test there with "No module named 'cutlass'")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, DSL_CACHE_ENV: str(cache), SHARE_ENV: "1" if share else "0",
           "PYTHONPATH": path}
    return subprocess.Popen([sys.executable, "-c", BUILD_AND_RUN, *SHARED_RECIPES], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, err[-4000:]
    return json.loads(lines[-1])


def test_a_layer_from_kernels_another_process_compiled_gives_the_same_bits(
        cuda_device, tmp_path: Path) -> None:
    first, unshared = _start(tmp_path / "shared", True), _start(tmp_path / "unshared", False)
    first, fresh = _result(first), _result(unshared)
    second = _result(_start(tmp_path / "shared", True))
    assert first["shared"] and second["shared"] and not fresh["shared"]
    assert first["compiles"] > 0 and first["hits"] == 0, first
    assert second["compiles"] == first["compiles"] and second["hits"] == second["compiles"], \
        (first, second)
    assert fresh["compiles"] == 0  # not shared: the counter is never installed
    assert second["digests"] == first["digests"] == fresh["digests"]
