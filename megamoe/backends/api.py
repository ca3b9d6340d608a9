"""What the contract suites need from a MegaMoE implementation (docs/contract.md s1-s11).

The harness judges any MegaMoE through two small interfaces, so that the ``single`` and
``multi`` contract tests run unchanged against our layer, FlashInfer's MegaMoE or a user's
own:

- a **backend** (``MoEBackend``) says what it is (``BackendInfo``: name, version, the GPU
  architectures and recipes it serves, its optional features), says why it cannot serve a
  layer (``refusal``: a sentence, never a skip) and builds one (``build``);
- a **layer handle** (``MoEHandle``) is one built layer on one rank: ``warmup`` (compile and
  allocate, then one eager forward), ``forward`` (eager, or recorded inside a CUDA-graph
  capture and replayed), ``check_errors`` (raise ``RouteError`` for bad routes recorded
  under graphs), ``destroy``, and ``stages_ran`` (which stages the last forward ran and
  how, so a test can assert that no stage fell back to a slow path).

A layer is asked for by a ``LayerSpec``: the contract configuration the oracle computes
(``oracle.moe_config.MoEConfig``: recipe, E, K, H, I, clamp, weighting, format settings)
and the capacity C. Weights are given as the canonical float tensors of the rank's own
experts, ``w13 [E_l, 2I, H]`` (gate rows, then up rows) and ``w2 [E_l, H, I]``; a backend
quantizes them by the recipe (docs/contract.md s4-s5) into whatever layout its kernels
want, exactly as the oracle's ``prepare_weights`` does, and never modifies them.

Inputs per forward are docs/contract.md s1's: ``hidden [T, H]`` bf16, ``topk_ids [T, K]``
int32 or int64, ``topk_weights [T, K]`` in any of the four score dtypes, ``T <= C``; under
CUDA graphs a ``live_tokens`` int32 ``[1]`` device tensor carries the live count of
capacity-shaped inputs. The output is ``[T, H]`` bf16 (or the caller's ``out``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from megamoe.errors import ConfigError
from oracle.moe_config import MoEConfig, _bad

FEATURES = frozenset({
    "cpu",           # builds on a CPU device too (the host tier runs it there)
    "cuda_graphs",   # forward is capturable and replays with new input contents (s9)
    "live_tokens",   # forward takes a device live count (capacity-shaped graph inputs, s9)
    "out_buffer",    # forward writes a caller's ``out`` and never its rows >= T (s8)
    "route_errors",  # eager RouteError and the graph status word of s2
    "ep",            # builds for a world of P ranks (s7)
    "workspaces",    # the handle lists its workspace tensors, so tests can poison them (s10)
})
"""The optional features a backend may declare (``BackendInfo.features``). A contract test
that needs a feature the selected backend lacks fails, naming the feature: a missing
feature is a finding, never a skip."""


@dataclass(frozen=True)
class BackendInfo:
    """What a backend is, for records and refusals.

    name: the registry name (``megamoe.backends.registry``), e.g. ``megamoe``.
    version: the implementation's version (package version, or a commit), recorded with
        every qualification run.
    archs: the CUDA architectures its kernels run on, as ``sm_XY`` strings (``sm_90`` for
        Hopper, ``sm_100``, ``sm_107``...). A GPU of another architecture is refused with a
        clear message before any test runs.
    recipes: the recipes of ``oracle.recipes.RECIPES`` it implements; the contract tests run
        each of them.
    features: a subset of ``FEATURES``.
    weightings: the places it applies the score, of ``WEIGHTINGS``; the first is the one the
        contract tests ask for when the rule they check is not about weighting (the contract
        requires early and late: a test checks that the backend declares both).
    """

    name: str
    version: str
    archs: tuple[str, ...]
    recipes: tuple[str, ...]
    features: frozenset[str] = field(default_factory=frozenset)
    weightings: tuple[str, ...] = ("early", "late")

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name):
            raise _bad("BackendInfo.name", "a non-empty str", repr(self.name))
        unknown = sorted(set(self.features) - FEATURES)
        if unknown:
            raise _bad("BackendInfo.features", f"a subset of {sorted(FEATURES)}", unknown)
        if not self.recipes:
            raise _bad("BackendInfo.recipes", "at least one recipe", "none")
        if not self.weightings or set(self.weightings) - set(WEIGHTINGS):
            raise _bad("BackendInfo.weightings", f"some of {list(WEIGHTINGS)}",
                       list(self.weightings))
        object.__setattr__(self, "features", frozenset(self.features))

    def as_record(self) -> dict[str, object]:
        """The ``moe_backend`` entry of a qualification record."""
        return {"name": self.name, "version": self.version, "archs": list(self.archs),
                "recipes": list(self.recipes), "features": sorted(self.features),
                "weightings": list(self.weightings)}


@dataclass(frozen=True)
class LayerSpec:
    """The layer a contract test asks for: the contract configuration and the capacity C
    (the most tokens one forward on one rank may carry; docs/contract.md s0)."""

    config: MoEConfig
    capacity: int

    def __post_init__(self) -> None:
        if not isinstance(self.config, MoEConfig):
            raise _bad("LayerSpec.config", "an oracle.moe_config.MoEConfig",
                       type(self.config).__name__)
        c = self.capacity
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise _bad("LayerSpec.capacity", "an int >= 1", repr(c))


WEIGHTINGS: dict[str, dict[str, bool]] = {
    "early": {},
    "late": {"late_weighting": True},
    "combine": {"combine_weighting": True},
}
"""Where a layer applies the router score (docs/contract.md s5.weighting, s12.combine-weighting),
by name, with the ``MoEConfig`` fields that ask for it."""


def device_arch(device: torch.device) -> str:
    """``sm_XY`` of a CUDA device (``cpu`` for a CPU device)."""
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def device_refusal(info: BackendInfo, device: torch.device) -> str | None:
    """Why ``info``'s backend cannot run on ``device``, or None (the architecture rule of
    the module docstring; a CPU device needs the ``cpu`` feature)."""
    if device.type == "cpu":
        return (None if "cpu" in info.features else
                f"backend {info.name} runs on CUDA GPUs only ({', '.join(info.archs)}), "
                "not on the CPU")
    arch = device_arch(device)
    if arch not in info.archs:
        return (f"backend {info.name} needs a GPU of architecture {' or '.join(info.archs)}; "
                f"this device ({torch.cuda.get_device_name(device)}) is {arch}")
    return None


NOT_OFFERED_SENTENCES = {
    "feature": "backend {name} {version} does not provide {missing}, which this contract rule "
               "needs",
    "recipe": "backend {name} implements recipes {recipes}, not {recipe}",
    "weighting": "backend {name} does not apply the score {missing} (it declares {declared})",
}
"""What a test that needs a capability the backend does not declare fails with: a feature,
a recipe, a place of the score (``feature_refusal``, ``recipe_refusal``,
``weighting_refusal``; ``NOT_OFFERED`` recognises them)."""


def feature_refusal(info: BackendInfo, *features: str) -> str | None:
    """None when the backend declares every one of ``features``, else a sentence naming the
    missing ones (a test that needs them fails with it)."""
    missing = [f for f in features if f not in info.features]
    if not missing:
        return None
    return NOT_OFFERED_SENTENCES["feature"].format(name=info.name, version=info.version,
                                                   missing=", ".join(missing))


def recipe_refusal(info: BackendInfo, recipe: str) -> str | None:
    """None when the backend implements ``recipe``, else the sentence a test that needs it
    fails with."""
    if recipe in info.recipes:
        return None
    return NOT_OFFERED_SENTENCES["recipe"].format(name=info.name, recipes=", ".join(info.recipes),
                                                  recipe=recipe)


def weighting_refusal(info: BackendInfo, *weightings: str) -> str | None:
    """None when the backend applies the score at every one of ``weightings`` (names of
    ``WEIGHTINGS``), else the sentence naming the places it does not."""
    missing = sorted(set(weightings) - set(info.weightings))
    if not missing:
        return None
    return NOT_OFFERED_SENTENCES["weighting"].format(
        name=info.name, missing=" or ".join(missing), declared=", ".join(info.weightings))


NOT_OFFERED = re.compile("|".join(
    re.sub(r"\\\{\w+\\\}", ".+?", re.escape(t)) for t in NOT_OFFERED_SENTENCES.values()))
"""Matches the sentences above anywhere in a failure's first line (each template with its
fields as any text): the failure is a capability the backend does not declare, not a wrong
output (the conformance table keeps the two apart)."""


@runtime_checkable
class MoEHandle(Protocol):
    """One built layer on one rank (module docstring)."""

    def warmup(self, hidden: torch.Tensor, topk_ids: torch.Tensor,
               topk_weights: torch.Tensor) -> torch.Tensor:
        """Compile and allocate for these inputs' dtypes, then run one eager forward and
        return its output. Never called inside a capture (s9)."""
        ...

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor,
                topk_weights: torch.Tensor, *, live_tokens: torch.Tensor | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """``out [T, H]`` bf16 (s1-s7); ``live_tokens`` and ``out`` as the module docstring
        and the ``live_tokens`` and ``out_buffer`` features say."""
        ...

    def check_errors(self) -> None:
        """Raise ``RouteError`` for the first bad route recorded under graph replays."""
        ...

    def destroy(self) -> None:
        """Release everything (symmetric memory too), also after a failure; idempotent."""
        ...

    def stages_ran(self) -> Mapping[str, str]:
        """Stage name -> how the last forward ran it (``"kernel"`` for a device kernel)."""
        ...

    def workspaces(self) -> tuple[torch.Tensor, ...]:
        """The layer's own buffers that a forward writes before it reads them (staged
        routes, activations, scales, route tables, terms): the changing-route tests pour
        NaN (integers: garbage) into them between states (s10). A backend without the
        ``workspaces`` feature returns ``()``."""
        ...


@runtime_checkable
class MoEBackend(Protocol):
    """A MegaMoE implementation the harness can judge (module docstring)."""

    info: BackendInfo

    def refusal(self, spec: LayerSpec, device: torch.device, world_size: int) -> str | None:
        """Why this backend cannot build ``spec`` on ``device`` in a world of ``world_size``
        ranks, or None. Read before ``build``; a refusal fails the test that asked."""
        ...

    def build(self, spec: LayerSpec, w13: torch.Tensor, w2: torch.Tensor, *,
              device: torch.device, world: object | None = None) -> MoEHandle:
        """The layer of this rank: ``w13``/``w2`` hold the rank's own experts (all E at
        EP1); ``world`` is the rank's EP world (``None``: EP1)."""
        ...


def refuse_unbuildable(backend: MoEBackend, spec: LayerSpec, device: torch.device,
                       world: object | None) -> None:
    """``build``'s first step in every backend: ``ConfigError`` with the backend's own
    ``refusal`` sentence, before anything is allocated (``world`` None: EP1)."""
    why = backend.refusal(spec, device, 1 if world is None else world.size)  # type: ignore[attr-defined]
    if why is not None:
        raise ConfigError("backend", "a layer the backend can build", why)


def as_kernel(handle: MoEHandle) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                                             torch.Tensor]:
    """A built layer as a one-rank kernel for ``oracle.check_kernel``: ``warmup`` on the first
    call (compile, allocate, one eager forward), ``forward`` on the others."""
    warm = False

    def kernel(hidden: torch.Tensor, topk_ids: torch.Tensor,
               topk_weights: torch.Tensor) -> torch.Tensor:
        nonlocal warm
        if not warm:
            warm = True
            return handle.warmup(hidden, topk_ids, topk_weights)
        return handle.forward(hidden, topk_ids, topk_weights)

    return kernel
