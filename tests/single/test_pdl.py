"""Programmatic dependent launch in the layer on the H200 (megamoe.pdl; docs/contract.md s9):
the kernels of a captured forward are linked by programmatic edges (the launch attribute
takes effect under capture), and PDL changes no bit: a captured forward replayed over
changing routes gives the same outputs in a process with the opposite ``MEGAMOE_PDL``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cuda.bindings.driver as cu
import pytest
import torch

from megamoe import pdl
from megamoe.graphs import capture
from megamoe.layer import LAYER_RECIPES, LayerConfig, MoELayer
from tests.layer_check import layer_routes, layer_weights

E, K, H, INTER, C = 8, 2, 256, 128, 64
ROUTE_STATES = ((1, 0.0), (2, 0.3), (3, 0.9), (4, 1.0), (5, 0.3))
"""(seed, masked-slot probability) of the route states replayed on one graph."""
BITWISE_RECIPES = ("bf16", "fp8_mxfp4")
"""One recipe per GEMM kernel module (``grouped_gemm_kernel``, ``mxfp4_gemm_kernel``); with
them every other kind of kernel the layer launches."""
ROOT = Path(__file__).resolve().parents[2]


def _layer(recipe: str, dev: torch.device) -> tuple[MoELayer, tuple, torch.Tensor]:
    w13, w2 = layer_weights(0, E, H, INTER)
    layer = MoELayer(LayerConfig(E, K, H, INTER, C, recipe=recipe), w13, w2, dev)
    x, ids, w = layer_routes(0, C, num_experts=E, top_k=K, hidden=H, mask_p=0.3, device=dev)
    out = torch.empty(C, H, dtype=torch.bfloat16, device=dev)
    layer.warmup(x, ids, w)
    return layer, (x, ids, w), out


def replayed_outputs(recipe: str, dev: torch.device) -> list[torch.Tensor]:
    """The outputs of one captured forward replayed over ``ROUTE_STATES`` (inputs changed in
    place, NaN poured into the output between replays), on the CPU."""
    layer, (x, ids, w), out = _layer(recipe, dev)
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        layer.forward(x, ids, w, out=out)
    outs = []
    for seed, mask_p in ROUTE_STATES:
        for dst, src in zip((x, ids, w), layer_routes(seed, C, num_experts=E, top_k=K,
                                                      hidden=H, mask_p=mask_p, device=dev),
                            strict=True):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        outs.append(out.cpu())
    layer.destroy()
    return outs


@pytest.mark.parametrize("recipe", LAYER_RECIPES)
def test_a_captured_forward_chains_its_kernels_by_programmatic_edges(cuda_device,
                                                                     recipe) -> None:
    layer, inputs, out = _layer(recipe, cuda_device)
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with capture(graph):
        layer.forward(*inputs, out=out)
    raw = graph.raw_cuda_graph()
    err, _, count = cu.cuGraphGetNodes(raw, 0)
    assert err == cu.CUresult.CUDA_SUCCESS
    err, _, _, _, n = cu.cuGraphGetEdges(raw, 0)
    err, _, _, data, n = cu.cuGraphGetEdges(raw, n)
    assert err == cu.CUresult.CUDA_SUCCESS
    programmatic = [d for d in data[:n]
                    if d.type == cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC]
    # one chain of kernels, stage to combine (7 kernels for bf16, more for the others)
    assert count >= 7 and n == count - 1
    assert len(programmatic) == (n if pdl.PDL else 0)
    layer.destroy()


@pytest.mark.mega_sm107("sparse-decode")
def test_outputs_are_the_same_bits_with_pdl_off(cuda_device, tmp_path: Path) -> None:
    """The other arm runs in a child process (the setting is read at import)."""
    saved = tmp_path / "other.pt"
    code = ("import sys, torch\n"
            "from tests.single.test_pdl import BITWISE_RECIPES, replayed_outputs\n"
            "dev = torch.device('cuda', 0)\n"
            "torch.save({r: replayed_outputs(r, dev) for r in BITWISE_RECIPES}, sys.argv[1])\n")
    env = dict(os.environ, **{pdl.ENV_VAR: "0" if pdl.PDL else "1"})
    proc = subprocess.run([sys.executable, "-c", code, str(saved)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    other = torch.load(saved)
    for recipe in BITWISE_RECIPES:
        ours = replayed_outputs(recipe, cuda_device)
        assert len(ours) == len(other[recipe]) == len(ROUTE_STATES)
        for state, (a, b) in enumerate(zip(ours, other[recipe], strict=True)):
            live = ~torch.isnan(a.float()).all(dim=1)
            assert bool(live.all()), f"{recipe} state {state}: rows left unwritten"
            assert torch.equal(a.view(torch.int16), b.view(torch.int16)), (recipe, state)
