"""Helpers of the multi tier (docs/contract.md s7, s8, s10): one shape per device kind, the
layers of a world built through the public API, every rank's inputs generated on every rank
(from the scenario library's seeds, so no rank needs another's tensors), the collective
oracle, and judgements gathered from every rank so that every rank's report names every
failing (rank, row) and all ranks pass or fail together (they stay in lockstep).

The layer API the tier drives (``build_layer``) is the backend interface
(``megamoe.backends``): build per rank for a spec and a world with the rank's own experts'
weights, ``warmup``, ``forward`` (eager or captured), ``check_errors``, ``destroy``, and
``workspaces`` for the poison between states. The contract tests judge the chosen backend
(``--moe-backend``); the tests of our exchange's internals build ``OURS``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from fixtures.scenarios import RankInputs, ScenarioState, make_scenario, make_sequence
from megamoe.backends import LayerSpec, MoEBackend, MoEHandle, load_backend
from megamoe.comm.launch import make_world
from megamoe.comm.world import World, WorldInfo
from megamoe.graphs import capture
from oracle.collective import ep_forward
from oracle.compare import compare_rows
from oracle.experts import prepare_weights
from oracle.moe_config import MoEConfig
from tests.layer_check import build_layer as build_backend_layer
from tests.layer_check import layer_weights, oracle_config, poison, poison_workspaces

OURS = load_backend("megamoe")
"""Our layer, for the tests of its exchange's internals (planted bugs, layout, timeouts)."""


@dataclass(frozen=True)
class MultiShape:
    """E, K, H, I, C of the tier's layers."""

    experts: int
    top_k: int
    hidden: int
    inter: int
    capacity: int


SHAPES = {"cpu": MultiShape(8, 2, 128, 64, 16), "cuda": MultiShape(8, 4, 256, 128, 192)}
"""One shape per device kind: small on the CPU world (the PyTorch paths); on GPUs a capacity
that holds the section 10 states' 129 live rows. E = 8 serves P = 1, 2, 4, 8."""
RECIPES = ("bf16", "fp8_mxfp4", "mxfp8", "nvfp4")


def shape_of(world: World) -> MultiShape:
    return SHAPES[world.device.type]


def config(shape: MultiShape, recipe: str = "bf16", **kw: object) -> LayerSpec:
    return LayerSpec(MoEConfig(recipe, shape.experts, shape.top_k, shape.hidden, shape.inter,
                               **kw), shape.capacity)  # type: ignore[arg-type]


WEIGHT_SEED = 11
_WEIGHTS: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def all_weights(shape: MultiShape) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 ``w13 [E, 2I, H]``, ``w2 [E, H, I]`` of every expert (CPU; the same on every rank)."""
    key = (shape.experts, shape.hidden, shape.inter)
    if key not in _WEIGHTS:
        _WEIGHTS[key] = layer_weights(WEIGHT_SEED, *key)
    return _WEIGHTS[key]


def local_weights(shape: MultiShape, world: World) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank r's experts ``[r*E_l, (r+1)*E_l)`` only (docs/contract.md s7)."""
    w13, w2 = all_weights(shape)
    e_l = shape.experts // world.size
    lo = world.rank * e_l
    return w13[lo : lo + e_l], w2[lo : lo + e_l]


def build_layer(backend: MoEBackend, cfg: LayerSpec, world: World | None, shape: MultiShape,
                device: torch.device) -> MoEHandle:
    """``backend``'s layer of this rank (``world`` None: the EP1 layer with every expert)."""
    if world is None:
        return build_backend_layer(backend, cfg, *all_weights(shape), device)
    return build_backend_layer(backend, cfg, *local_weights(shape, world), device, world)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).cpu()


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(bits(t).numpy().tobytes()).hexdigest()[:16]


def oracle_outputs(cfg: LayerSpec, shape: MultiShape,
                   inputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
                   ) -> list[torch.Tensor]:
    """Every rank's output from the collective reference (``oracle.collective.ep_forward``,
    CPU, all experts), for live inputs given per rank."""
    ocfg = oracle_config(cfg)
    weights = prepare_weights(*(w.float() for w in all_weights(shape)), ocfg)
    cpu = [tuple(t.cpu() for t in x) for x in inputs]
    return ep_forward(cpu, weights, ocfg, len(cpu), capacity=cfg.capacity)


def live_inputs(state: ScenarioState) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    return [r.live() for r in state.ranks]


@dataclass
class Verdict:
    """Problems found on this rank; ``gather`` shares them with every rank."""

    lines: list[str] = field(default_factory=list)

    def judge(self, rank: int, what: str, got: torch.Tensor, want: torch.Tensor,
              ids: torch.Tensor, recipe: str) -> None:
        report = compare_rows(got, want, ids, recipe, rank=rank)
        self.lines += [f"{what}: {p}" for p in report.problems]

    def equal_bits(self, rank: int, what: str, got: torch.Tensor, want: torch.Tensor) -> None:
        g, w = bits(got), bits(want)
        if g.shape != w.shape:
            self.lines.append(f"rank {rank}: {what}: shape {tuple(g.shape)} != {tuple(w.shape)}")
            return
        if g.numel() == 0:
            return
        rows = (g != w).reshape(g.shape[0], -1).any(dim=1).nonzero().flatten().tolist()
        if rows:
            self.lines.append(f"rank {rank}: {what}: {len(rows)} row(s) differ bitwise: "
                              f"{rows[:8]}")

    def check(self, rank: int, what: str, ok: bool) -> None:
        if not ok:
            self.lines.append(f"rank {rank}: {what}")

    def gather(self, world: World) -> list[str]:
        """Every rank's problems, in rank order (collective)."""
        return [line for part in world.all_gather_object(self.lines) for line in part]

    def assert_clean(self, world: World) -> None:
        everything = self.gather(world)
        assert not everything, "\n".join(everything)


def check_failure(work) -> str | None:  # type: ignore[no-untyped-def]
    """A benchmark workload's pre-timing check: its failure message, or None when it passes."""
    try:
        work.check()
    except AssertionError as e:
        return str(e) or "check failed"
    return None


SUB_WORLD_BACKEND = {"nvshmem": "torch_symm"}
"""The backend of the smaller sub-worlds where it differs from the world's: NVSHMEM runs once
per process over every rank of the world (``megamoe.comm.process_runtime``; a world over a
block of ranks would need NVSHMEM teams, which ``NvshmemWorld`` does not make), so in an
nvshmem world the invariance test compares the nvshmem world of P ranks with torch symmetric
memory worlds of the sizes below it."""


@dataclass
class SubWorlds:
    """Worlds over blocks of consecutive ranks, one per size that divides P (module
    docstring of ``tests.multi.conftest``); the smaller ones on ``SUB_WORLD_BACKEND``'s
    backend where it names the world's."""

    worlds: dict[int, World]

    @classmethod
    def create(cls, world: World) -> SubWorlds:
        worlds: dict[int, World] = {}
        for size in range(1, world.size + 1):
            if world.size % size:
                continue
            if size == world.size:
                worlds[size] = world
                continue
            mine = None
            for block in range(world.size // size):
                ranks = list(range(block * size, (block + 1) * size))
                group = dist.new_group(ranks, backend="gloo")
                if world.rank in ranks:
                    mine = group
            backend = SUB_WORLD_BACKEND.get(world.backend, world.backend)
            info = WorldInfo(world.rank % size, size, world.mode, backend, world.device,
                             world.timeout_s)
            worlds[size] = make_world(info, mine)
        return cls(worlds)

    def destroy(self) -> None:
        for size, w in self.worlds.items():
            if size != max(self.worlds):
                w.destroy()


def short_timeout_world(world: World, timeout_s: float) -> World:
    """A world over every rank (a new gloo group) whose waits expire after ``timeout_s``:
    for the tests that make a peer miss a step. Collective."""
    group = dist.new_group(list(range(world.size)), backend="gloo",
                           timeout=timedelta(seconds=timeout_s))
    info = WorldInfo(world.rank, world.size, world.mode, world.backend, world.device,
                     timeout_s)
    return make_world(info, group)


def rank_inputs(r: RankInputs, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, ids, w = r.live()
    return x.to(device), ids.to(device), w.to(device)


def world_scenario(world: World, shape: MultiShape, name: str, seed: int) -> ScenarioState:
    """The scenario library's state ``name`` for every rank of ``world`` at ``shape``'s sizes
    (``fixtures.scenarios.make_scenario``)."""
    return make_scenario(name, world_size=world.size, capacity=shape.capacity,
                         top_k=shape.top_k, num_experts=shape.experts,
                         hidden_size=shape.hidden, seed=seed)


def rank_scenario_inputs(world: World, shape: MultiShape, name: str, seed: int
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's live inputs of the state ``name`` (``world_scenario``), on its device."""
    return rank_inputs(world_scenario(world, shape, name, seed).ranks[world.rank], world.device)


def world_sequence(world: World, shape: MultiShape, seed: int) -> tuple[ScenarioState, ...]:
    """Every state of ``CHANGING_ROUTE_SEQUENCE``, in order, for every rank of ``world`` at
    ``shape``'s sizes (``fixtures.scenarios.make_sequence``)."""
    return make_sequence(world_size=world.size, capacity=shape.capacity, top_k=shape.top_k,
                         num_experts=shape.experts, hidden_size=shape.hidden, seed=seed)


def eager_changing_run(world: World, layer: MoEHandle, ep1: MoEHandle, shape: MultiShape,
                       cfg: LayerSpec, names: tuple[str, ...], seed: int) -> Verdict:
    """Eager forwards over the scenario states ``names`` with NaN poured into every region of
    both layers between states (then a barrier, so no peer pushes before the poison is in);
    every rank's every live row against the collective oracle and bitwise against EP1."""
    verdict = Verdict()
    for i, name in enumerate(names):
        state = world_scenario(world, shape, name, seed)
        x, ids, w = rank_inputs(state.ranks[world.rank], world.device)
        if i == 0:
            layer.warmup(x, ids, w)
            ep1.warmup(x, ids, w)
        if world.device.type == "cuda":
            torch.cuda.synchronize(world.device)
        poison_workspaces(layer)
        poison_workspaces(ep1)
        if world.device.type == "cuda":
            torch.cuda.synchronize(world.device)
        world.barrier(f"poisoned before {name}")
        got = layer.forward(x, ids, w)
        want = oracle_outputs(cfg, shape, live_inputs(state))[world.rank]
        verdict.judge(world.rank, f"{cfg.config.recipe} {name}", got, want, ids, cfg.config.recipe)
        verdict.equal_bits(world.rank, f"{cfg.config.recipe} {name} vs EP1", got, ep1.forward(x, ids, w))
    return verdict


NAN_BF16 = torch.tensor(float("nan"), dtype=torch.bfloat16)


class CapturedLayer:
    """One rank's layer captured once over capacity-shaped buffers (docs/contract.md s9)."""

    def __init__(self, backend, world, cfg, shape) -> None:  # type: ignore[no-untyped-def]
        dev = world.device
        self.world, self.cfg, self.shape = world, cfg, shape
        c, k, h = shape.capacity, shape.top_k, shape.hidden
        self.layer = build_layer(backend, cfg, world, shape, dev)
        self.ep1 = build_layer(backend, cfg, None, shape, dev)
        self.x = torch.zeros(c, h, dtype=torch.bfloat16, device=dev)
        self.ids = torch.full((c, k), -1, dtype=torch.int64, device=dev)
        self.w = torch.zeros(c, k, dtype=torch.float32, device=dev)
        self.live = torch.full((1,), c, dtype=torch.int32, device=dev)
        self.out = torch.zeros(c, h, dtype=torch.bfloat16, device=dev)
        self.layer.warmup(self.x, self.ids, self.w)
        self.ep1.warmup(self.x, self.ids, self.w)
        self.layer.forward(self.x, self.ids, self.w, live_tokens=self.live, out=self.out)
        torch.cuda.synchronize(dev)
        world.barrier("warm before capture")
        self.graph = torch.cuda.CUDAGraph()
        with capture(self.graph):
            self.layer.forward(self.x, self.ids, self.w, live_tokens=self.live, out=self.out)

    def load(self, hidden, ids, w, t: int) -> None:  # type: ignore[no-untyped-def]
        """New contents in place (capacity-shaped; rows >= t are garbage), the workspace
        poisoned, every rank past the poison before anyone replays."""
        c = self.shape.capacity
        for dst, src in ((self.x, hidden), (self.ids, ids), (self.w, w)):
            dst.copy_(src[:c].to(dst.device))
        self.live.fill_(t)
        torch.cuda.synchronize(self.world.device)
        self.world.barrier("state loaded")
        poison_workspaces(self.layer, self.out)
        torch.cuda.synchronize(self.world.device)
        self.world.barrier("workspace poisoned")

    def replay(self) -> torch.Tensor:
        poison(self.out)
        self.graph.replay()
        torch.cuda.synchronize(self.world.device)
        return self.out.clone()

    def destroy(self) -> None:
        self.layer.destroy()
        self.ep1.destroy()


def judge_first(v: Verdict, cl: CapturedLayer, what: str, first: torch.Tensor, t: int,
                live, want: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    """The first replay of a state: rows past T untouched (still NaN), rows [0, T) equal to an
    eager EP forward and to EP1, and within the oracle's bound."""
    r = cl.world.rank
    x, ids, w = (a.to(cl.world.device) for a in live)
    v.check(r, f"{what}: rows >= T were written",
            bool((bits(first[t:]) == bits(NAN_BF16)).all()))
    v.equal_bits(r, f"{what}: replay vs eager", first[:t], cl.layer.forward(x, ids, w))
    v.equal_bits(r, f"{what}: replay vs EP1", first[:t], cl.ep1.forward(x, ids, w))
    v.judge(r, what, first[:t], want, ids, cl.cfg.config.recipe)
