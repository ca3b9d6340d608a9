"""FlashInfer's sm90 MegaMoE as backends of the contract suites (``megamoe.backends.api``), from
``flashinfer-python`` 0.7.2.post1, loaded by ``megamoe.backends.flashinfer_loader`` (in a
process of its own: FlashInfer needs a newer CuTe DSL than ours). At EP1 a layer bootstraps
its own gloo group when no torchrun environment is set.

``flashinfer-sm90-fp8-pull``: ``fp8_fp8_bf16_pull_cutedsl`` with ``fp8_scale_mode="blockwise"``;
the score is applied before FC2 (early), its ``gate_up_clamp`` is the contract's clamp; other
settings are FlashInfer's defaults. Its recipe is ``fp8_block_fi`` (docs/contract.md s12:
W13 tiles over gate and up rows alternating in groups of 8, A2 in 1 x 64 blocks with
``x * (1/d)``), which it declares first; it also declares ``fp8_block``, the DeepSeek-V3 recipe
it is often taken for, so that the suites show how far it is from that one (0.05 to 0.12 per
row, beyond section 8's 0.02: docs/conformance.md). Both build the same layer. At EP1 it
runs in FlashInfer's single-rank mode, ``MEGA_NO_DIST=1`` (plain CUDA buffers instead of an
NVSHMEM symmetric heap, no ``torch.distributed`` group): without it the backend needs
nvshmem4py even for one rank. The adapter sets it in this process when it builds a layer, and
it stays set, because FlashInfer reads it again when it runs and frees the layer.

``flashinfer-sm90-cake``: ``bf16_bf16_bf16_push_cake``, recipe ``bf16``. It applies the score in
the combine (``per_route`` wire: each route's bf16 term times its score, rounded to bf16;
``prereduced``: an fma chain over the routes), so it builds layers asked for combine or late
weighting and refuses early weighting by name; its ``clamp_limit`` clamps gate and up to
``[-c, c]``, which the contract's clamp (gate from above only) judges.

Both adapters convert the caller's ids to int32 and scores to float32, the only dtypes the
backends take (lossless for the contract's valid routes), and declare only what FlashInfer
provides itself: CUDA graphs (capture ``forward`` after ``warmup``); no device live count, no
caller ``out`` buffer of more than ``T`` rows (the runner needs exactly ``[T, H]``), no route
errors (an out-of-range id traps the device and ends the CUDA context, so the suites never
send one), no workspace list. Tests that need those fail, naming the feature: the
conformance table reports them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property

import torch

from megamoe.backends.api import BackendInfo, LayerSpec, device_refusal, refuse_unbuildable
from megamoe.backends.flashinfer_loader import (
    FlashinferNotFound,
    flashinfer_root,
    flashinfer_version,
    load_moe_ep,
)
from megamoe.errors import ConfigError

CAKE_TOP_K = (1, 2, 4, 6, 8)
CAKE_H_MULTIPLE = 256
CAKE_I_MULTIPLE = 128


def _version() -> str:
    try:
        return flashinfer_version(flashinfer_root())
    except FlashinferNotFound:
        return "not found"


class FlashinferHandle:
    """One FlashInfer MegaMoE layer behind ``MoEHandle``."""

    def __init__(self, moe_ep, layer, device: torch.device) -> None:  # type: ignore[no-untyped-def]
        self._ep, self._layer, self._device = moe_ep, layer, device

    def _tensors(self, hidden: torch.Tensor, ids: torch.Tensor, scores: torch.Tensor):  # type: ignore[no-untyped-def]
        return self._ep.MoEEpTensors(hidden_states=hidden.contiguous(),
                                     topk_ids=ids.to(torch.int32).contiguous(),
                                     topk_weights=scores.to(torch.float32).contiguous())

    def warmup(self, hidden: torch.Tensor, topk_ids: torch.Tensor,
               topk_weights: torch.Tensor) -> torch.Tensor:
        self._layer.warmup(self._tensors(hidden, topk_ids, topk_weights))
        return self.forward(hidden, topk_ids, topk_weights)

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                *, live_tokens: torch.Tensor | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        if live_tokens is not None:
            raise ConfigError("live_tokens", "None (FlashInfer's layer has no device live "
                              "count)", "a tensor")
        if out is not None:
            raise ConfigError("out", "None (FlashInfer's layer writes a new [T, H] tensor)",
                              "a tensor")
        return self._layer.forward(self._tensors(hidden, topk_ids, topk_weights))

    def check_errors(self) -> None:
        """FlashInfer records no bad route (it traps): nothing to read; waits for the work."""
        torch.cuda.synchronize(self._device)

    def destroy(self) -> None:
        if self._layer is not None:
            self._layer.destroy()
            self._layer = None

    def stages_ran(self) -> Mapping[str, str]:
        return {"megamoe": "kernel"}

    def workspaces(self) -> tuple[torch.Tensor, ...]:
        return ()


class FlashinferBackend:
    """What both FlashInfer adapters share: the refusal order (device, this backend's own
    conditions, the FlashInfer files), the EP1 build and ``info``; a subclass names itself,
    its recipe and weightings, its ``conditions`` and its ``megakernel`` config."""

    NAME: str
    RECIPES: tuple[str, ...]
    WEIGHTINGS: tuple[str, ...]

    @cached_property
    def info(self) -> BackendInfo:
        """Built on first use, not at import: the version is read from the FlashInfer files
        found then (``flashinfer_root``)."""
        return BackendInfo(self.NAME, _version(), ("sm_90",), self.RECIPES,
                           frozenset({"cuda_graphs"}), self.WEIGHTINGS)

    def conditions(self, spec: LayerSpec, world_size: int) -> tuple[tuple[bool, str], ...]:
        """``(holds, what the backend takes)`` pairs, in the order they are reported."""
        raise NotImplementedError

    def megakernel(self, ep, spec: LayerSpec):  # type: ignore[no-untyped-def]
        """The backend's ``MegaConfig.megakernel`` config for ``spec``."""
        raise NotImplementedError

    def single_rank_env(self) -> Mapping[str, str]:
        """Environment FlashInfer reads to run this backend on one rank (set when a layer is
        built, after every refusal; none by default)."""
        return {}

    def refusal(self, spec: LayerSpec, device: torch.device, world_size: int) -> str | None:
        why = device_refusal(self.info, device)
        if why is not None:
            return why
        for ok, what in ((world_size == 1, f"EP1 only in this adapter, not {world_size} ranks"),
                         *self.conditions(spec, world_size)):
            if not ok:
                return f"backend {self.info.name} takes {what}"
        try:
            flashinfer_root()
        except FlashinferNotFound as err:
            return f"backend {self.info.name}: {err}"
        return None

    def build(self, spec: LayerSpec, w13: torch.Tensor, w2: torch.Tensor, *,
              device: torch.device, world: object | None = None) -> FlashinferHandle:
        refuse_unbuildable(self, spec, device, world)
        os.environ.update(self.single_rank_env())
        ep = load_moe_ep()
        c = spec.config
        weights = ep.MoEWeightPack(w13.to(device, torch.bfloat16).contiguous(),
                                   w2.to(device, torch.bfloat16).contiguous())
        layer = ep.MoEEpLayer(
            ep.BootstrapConfig(world_size=1, rank=0, device=device.index or 0),
            ep.FleetParams(num_experts=c.num_experts, max_tokens_per_rank=spec.capacity,
                           token_hidden_size=c.hidden_size),
            weights, backend=ep.MegaConfig(megakernel=self.megakernel(ep, spec)))
        return FlashinferHandle(ep, layer, device)


class CakeBackend(FlashinferBackend):
    """``flashinfer-sm90-cake`` (module docstring)."""

    NAME, RECIPES, WEIGHTINGS = "flashinfer-sm90-cake", ("bf16",), ("combine", "late")

    def conditions(self, spec: LayerSpec, world_size: int) -> tuple[tuple[bool, str], ...]:
        c = spec.config
        return (
            (c.recipe == "bf16", f"recipe bf16 only, not {c.recipe}"),
            (c.late_weighting or c.combine_weighting,
             "late or combine weighting, not early (it applies the score in the combine)"),
            (c.top_k in CAKE_TOP_K, f"top_k in {CAKE_TOP_K}, not {c.top_k}"),
            (c.hidden_size % CAKE_H_MULTIPLE == 0,
             f"hidden_size a multiple of {CAKE_H_MULTIPLE}, not {c.hidden_size}"),
            (c.intermediate_size % CAKE_I_MULTIPLE == 0,
             f"intermediate_size a multiple of {CAKE_I_MULTIPLE}, not {c.intermediate_size}"),
            (c.clamp is None or c.clamp > 0, f"a clamp > 0 (clamp_limit), not {c.clamp}"),
        )

    def megakernel(self, ep, spec: LayerSpec):  # type: ignore[no-untyped-def]
        c = spec.config
        return ep.Sm90_Bf16_Bf16_Bf16_PushCake_MegaMoeConfig(
            intermediate_size=c.intermediate_size, top_k=c.top_k, clamp_limit=c.clamp)


CAKE = CakeBackend()


PULL_MULTIPLE = 128
"""Blockwise FP8 scales are 128 x 128: H and I multiples of 128."""
NO_DIST_ENV = "MEGA_NO_DIST"
"""FlashInfer's single-rank switch of its CuTe DSL mega kernels (module docstring)."""


class Fp8PullBackend(FlashinferBackend):
    """``flashinfer-sm90-fp8-pull`` (module docstring)."""

    NAME, RECIPES, WEIGHTINGS = ("flashinfer-sm90-fp8-pull", ("fp8_block_fi", "fp8_block"),
                                 ("early",))

    def conditions(self, spec: LayerSpec, world_size: int) -> tuple[tuple[bool, str], ...]:
        c = spec.config
        return (
            (c.recipe in self.RECIPES,
             f"recipe {' or '.join(self.RECIPES)} only, not {c.recipe}"),
            (not (c.late_weighting or c.combine_weighting),
             "early weighting only (it applies the score before FC2)"),
            (c.hidden_size % PULL_MULTIPLE == 0 and c.intermediate_size % PULL_MULTIPLE == 0,
             f"H and I multiples of {PULL_MULTIPLE}, not {c.hidden_size} and "
             f"{c.intermediate_size}"),
        )

    def single_rank_env(self) -> Mapping[str, str]:
        return {NO_DIST_ENV: "1"}

    def megakernel(self, ep, spec: LayerSpec):  # type: ignore[no-untyped-def]
        c = spec.config
        return ep.Sm90_Fp8_Fp8_Bf16_PullCutedsl_MegaMoeConfig(
            intermediate_size=c.intermediate_size, top_k=c.top_k, fp8_scale_mode="blockwise",
            gate_up_clamp=c.clamp)


FP8_PULL = Fp8PullBackend()
