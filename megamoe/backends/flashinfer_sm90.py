"""FlashInfer's sm90 MegaMoE as backends of the contract suites (``megamoe.backends.api``).

``flashinfer-sm90-cake``: ``bf16_bf16_bf16_push_cake`` of ``flashinfer-python`` 0.7.2.post1,
loaded by ``megamoe.backends.flashinfer_loader`` (its own process: FlashInfer needs a newer
CuTe DSL than ours). At EP1 the layer bootstraps its own gloo group when no torchrun
environment is set. What the adapter does and does not do:

- it converts the caller's ids to int32 and scores to float32, the only dtypes the backend
  takes (lossless for the contract's valid routes);
- it declares only what FlashInfer provides itself: CUDA graphs (capture ``forward`` after
  ``warmup``); no device live count, no caller ``out`` buffer of more than ``T`` rows (its
  runner needs exactly ``[T, H]``), no route errors (an out-of-range id traps the device and
  ends the CUDA context, so the suites never send one), no workspace list. Tests that need
  those fail, naming the feature: the conformance table reports them;
- the score is applied in the combine by FlashInfer (``per_route`` wire: each route's bf16
  term times its score, rounded to bf16; ``prereduced``: an fma chain over the routes), so it
  builds layers asked for late weighting or combine weighting and refuses early weighting by
  name; its clamp (``clamp_limit``) clamps gate and up to ``[-c, c]``, which the contract's
  clamp (gate from above only) judges.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from megamoe.backends.api import BackendInfo, LayerSpec, device_refusal
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


class CakeHandle:
    """One FlashInfer cake layer behind ``MoEHandle``."""

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
            raise ConfigError("live_tokens", "None (flashinfer-sm90-cake has no device live "
                              "count)", "a tensor")
        if out is not None:
            raise ConfigError("out", "None (flashinfer-sm90-cake writes a new [T, H] tensor)",
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


class CakeBackend:
    """``flashinfer-sm90-cake`` (module docstring)."""

    def __init__(self) -> None:
        self.info = BackendInfo("flashinfer-sm90-cake", _version(), ("sm_90",), ("bf16",),
                                frozenset({"cuda_graphs"}), ("combine", "late"))

    def refusal(self, spec: LayerSpec, device: torch.device, world_size: int) -> str | None:
        why = device_refusal(self.info, device)
        if why is not None:
            return why
        c = spec.config
        checks = (
            (world_size == 1, f"EP1 only in this adapter, not {world_size} ranks"),
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
        for ok, what in checks:
            if not ok:
                return f"backend flashinfer-sm90-cake takes {what}"
        try:
            flashinfer_root()
        except FlashinferNotFound as err:
            return f"backend flashinfer-sm90-cake: {err}"
        return None

    def build(self, spec: LayerSpec, w13: torch.Tensor, w2: torch.Tensor, *,
              device: torch.device, world: object | None = None) -> CakeHandle:
        why = self.refusal(spec, device, 1 if world is None else world.size)  # type: ignore[attr-defined]
        if why is not None:
            raise ConfigError("backend", "a layer the backend can build", why)
        ep = load_moe_ep()
        c = spec.config
        weights = ep.MoEWeightPack(w13.to(device, torch.bfloat16).contiguous(),
                                   w2.to(device, torch.bfloat16).contiguous())
        layer = ep.MoEEpLayer(
            ep.BootstrapConfig(world_size=1, rank=0, device=device.index or 0),
            ep.FleetParams(num_experts=c.num_experts, max_tokens_per_rank=spec.capacity,
                           token_hidden_size=c.hidden_size),
            weights,
            backend=ep.MegaConfig(megakernel=ep.Sm90_Bf16_Bf16_Bf16_PushCake_MegaMoeConfig(
                intermediate_size=c.intermediate_size, top_k=c.top_k, clamp_limit=c.clamp)),
        )
        return CakeHandle(ep, layer, device)


CAKE = CakeBackend()
