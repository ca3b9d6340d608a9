"""Our layer (``megamoe.layer.MoELayer``) as a backend of the contract suites
(``megamoe.backends.api``; docs/contract.md s1-s11), at EP1 and in an EP world
(``megamoe.comm.World``).

The handle is the layer itself: ``MoELayer`` already has the handle's methods, and
``stages_ran`` reads its ``last_paths``. The spec becomes a ``LayerConfig``; what the layer
cannot build is refused with the layer's own ``ConfigError`` message (H and I multiples of
the GEMM tiles) or, for a setting the layer has no field for, a sentence that names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

import torch

from megamoe.backends.api import BackendInfo, LayerSpec, device_refusal, refuse_unbuildable
from megamoe.dispatch.api import OUTPUT_REGIONS
from megamoe.errors import ConfigError
from megamoe.layer import LAYER_RECIPES, LayerConfig, MoELayer
from megamoe.layer.ep_exchange import EXCHANGE_DATA_REGIONS

KERNEL_ARCHS = ("sm_90",)
"""The layer's kernels are built for sm_90a (Hopper: H100, H200)."""
LAYER_MXFP4_MODE = "rceil"
"""The MX scale mode the layer quantizes MXFP4 weights with (it has no setting for it)."""


def _version() -> str:
    try:
        return metadata.version("megamoe")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "source"


def layer_config(spec: LayerSpec) -> LayerConfig:
    """The ``LayerConfig`` of ``spec`` (raises ``ConfigError`` for what the layer cannot
    build)."""
    c = spec.config
    return LayerConfig(c.num_experts, c.top_k, c.hidden_size, c.intermediate_size,
                       spec.capacity, recipe=c.recipe, clamp=c.clamp,
                       late_weighting=c.late_weighting, mxfp8_elem=c.mxfp8_elem,
                       mxfp8_mode=c.mxfp8_mode, nvfp4_input_scale=c.nvfp4_input_scale,
                       nvfp4_a2_scale=c.nvfp4_a2_scale)


class LayerHandle:
    """``MoELayer`` behind ``MoEHandle``: every call goes to the layer."""

    def __init__(self, layer: MoELayer) -> None:
        self.layer = layer
        self.warmup = layer.warmup
        self.forward = layer.forward
        self.check_errors = layer.check_errors
        self.destroy = layer.destroy

    def stages_ran(self) -> Mapping[str, str]:
        return dict(self.layer.last_paths or {})

    def workspaces(self) -> tuple[torch.Tensor, ...]:
        """Every region a forward writes before it reads it: the staged routes (ids, scores),
        payload and scales; the layout's outputs; the route tables; the GEMM, A2, term and
        output buffers. Not the route-check status word and its bad-route record, which
        ``check_errors`` reads across forwards."""
        layer = self.layer
        ws = layer._stage_ws
        layout = ([] if layer._layout_ws is None else
                  [layer._layout_ws.view(n) for n in OUTPUT_REGIONS])
        out = [ws.ids, ws.scores, ws.payload, ws.scales, *layout,
               layer._counts, layer._seg, layer._src_row, layer._pos, layer._term_row,
               layer._row_scale, layer._a1, layer._a2, layer._act, layer._pre1, layer._pre2,
               layer._h2, layer._terms, layer._out]
        ep = layer._ep
        if ep is not None:  # the symmetric data regions (not the flags: the protocol itself)
            out += [ep.ws.local(n) for n in EXCHANGE_DATA_REGIONS if n in ep.ws.specs]
            for lay in (ep.global_layout_ws, ep.own_layout_ws):
                out += [lay.view(n) for n in OUTPUT_REGIONS]
            out += [ep.send_dest, ep.send_dst, ep.send_row, ep.send_flat, ep.ret_dest,
                    ep.ret_dst, ep.recv_layout.order_expert]
        return tuple(t for t in out if t is not None and t.numel())


class MegamoeBackend:
    """The ``megamoe`` backend (module docstring)."""

    def __init__(self) -> None:
        self.info = BackendInfo(
            "megamoe", _version(), KERNEL_ARCHS, LAYER_RECIPES,
            frozenset({"cpu", "cuda_graphs", "live_tokens", "out_buffer", "route_errors",
                       "workspaces", "ep"}),
        )

    def refusal(self, spec: LayerSpec, device: torch.device, world_size: int) -> str | None:
        why = device_refusal(self.info, device)
        if why is not None:
            return why
        if spec.config.num_experts % world_size:
            return (f"backend megamoe needs E % P == 0: {spec.config.num_experts} experts over "
                    f"{world_size} ranks")
        if spec.config.recipe == "fp8_mxfp4" and spec.config.mxfp4_mode != LAYER_MXFP4_MODE:
            return (f"backend megamoe quantizes MXFP4 weights with mode {LAYER_MXFP4_MODE} only, "
                    f"not {spec.config.mxfp4_mode}")
        try:
            layer_config(spec)
        except ConfigError as err:
            return f"backend megamoe cannot build this layer: {err}"
        return None

    def build(self, spec: LayerSpec, w13: torch.Tensor, w2: torch.Tensor, *,
              device: torch.device, world: object | None = None) -> LayerHandle:
        refuse_unbuildable(self, spec, device, world)
        if world is None:
            return LayerHandle(MoELayer(layer_config(spec), w13, w2, device))
        return LayerHandle(MoELayer(layer_config(spec), w13, w2, device, world=world))


BACKEND = MegamoeBackend()
