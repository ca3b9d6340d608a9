"""Helpers of the multi tier (docs/contract.md s7, s8, s10): one shape per device kind, the
layers of a world built through the public API, every rank's inputs generated on every rank
(from the scenario library's seeds, so no rank needs another's tensors), the collective
oracle, and judgements gathered from every rank so that every rank's report names every
failing (rank, row) and all ranks pass or fail together (they stay in lockstep).

The layer API the tier drives (``build_layer``): construct per rank for a config and a
world with the rank's own experts' weights, ``warmup``, ``forward`` (eager or captured),
``check_errors``, ``destroy``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from fixtures.scenarios import RankInputs, ScenarioState
from megamoe.comm.launch import make_world
from megamoe.comm.world import World, WorldInfo
from megamoe.layer import LayerConfig, MoELayer
from oracle.collective import ep_forward
from oracle.compare import compare_rows
from oracle.experts import prepare_weights
from tests.layer_check import layer_weights, oracle_config


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


def config(shape: MultiShape, recipe: str = "bf16", **kw: object) -> LayerConfig:
    return LayerConfig(shape.experts, shape.top_k, shape.hidden, shape.inter, shape.capacity,
                       recipe=recipe, **kw)  # type: ignore[arg-type]


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


def build_layer(cfg: LayerConfig, world: World | None, shape: MultiShape,
                device: torch.device) -> MoELayer:
    """The layer of this rank (``world`` None: the EP1 layer with every expert)."""
    if world is None:
        return MoELayer(cfg, *all_weights(shape), device)
    return MoELayer(cfg, *local_weights(shape, world), world=world)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).cpu()


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(bits(t).numpy().tobytes()).hexdigest()[:16]


def oracle_outputs(cfg: LayerConfig, shape: MultiShape,
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


@dataclass
class SubWorlds:
    """Worlds over blocks of consecutive ranks, one per size that divides P (module
    docstring of ``tests.multi.conftest``)."""

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
            info = WorldInfo(world.rank % size, size, world.mode, world.backend, world.device,
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


POISON_INT = -7
EXCHANGE_DATA_REGIONS = ("ids", "payload", "scales", "scores", "terms")
"""The symmetric regions a forward writes data into; ``flags`` is left alone: the flags are
the protocol itself (monotonic epochs), not data a forward rewrites."""


def poison(t: torch.Tensor) -> None:
    """NaN into a floating tensor (E8M0/E4M3 bytes: their NaN encodings), -7 into integers."""
    if t.element_size() == 1:
        t.view(torch.uint8).fill_(0xFF)
    elif t.is_floating_point():
        t.fill_(float("nan"))
    else:
        t.fill_(POISON_INT)


def poison_layer(layer: MoELayer, *buffers: torch.Tensor) -> None:
    """NaN into every region a forward of ``layer`` writes (docs/contract.md s10): staging,
    layout tables, receive buffers, terms, the GEMM buffers, and ``buffers`` (outputs).
    The caller meets its peers at a barrier afterwards (a peer must not push into this rank
    before the poison is in)."""
    ws = layer._stage_ws
    targets = [ws.payload, ws.ids, ws.scores, layer._a1, layer._a2, layer._h2, layer._out,
               layer._act, layer._pre1, layer._pre2, layer._row_scale, *buffers]
    if ws.scales is not None:
        targets.append(ws.scales)
    if layer._terms is not None:
        targets.append(layer._terms)
    ep = layer._ep
    if ep is not None:
        targets += [ep.ws.local(n) for n in EXCHANGE_DATA_REGIONS if n in ep.ws.specs]
        for lay in (ep.global_layout_ws, ep.own_layout_ws):
            targets += [lay.view(n) for n in ("counts", "expert_counts", "rank_counts",
                                               "expert_offsets", "order", "order_expert",
                                               "active_extent")]
        targets += [ep.send_dest, ep.send_dst, ep.send_row, ep.send_flat, ep.ret_dest,
                    ep.ret_dst, ep.recv_layout.order_expert]
    for t in targets:
        if t.numel():
            poison(t)


def eager_changing_run(world: World, layer: MoELayer, ep1: MoELayer, shape: MultiShape,
                       cfg: LayerConfig, names: tuple[str, ...], seed: int) -> Verdict:
    """Eager forwards over the scenario states ``names`` with NaN poured into every region of
    both layers between states (then a barrier, so no peer pushes before the poison is in);
    every rank's every live row against the collective oracle and bitwise against EP1."""
    from fixtures.scenarios import make_scenario

    verdict = Verdict()
    for i, name in enumerate(names):
        state = make_scenario(name, world_size=world.size, capacity=shape.capacity,
                              top_k=shape.top_k, num_experts=shape.experts,
                              hidden_size=shape.hidden, seed=seed)
        x, ids, w = rank_inputs(state.ranks[world.rank], world.device)
        if i == 0:
            layer.warmup(x, ids, w)
            ep1.warmup(x, ids, w)
        if world.device.type == "cuda":
            torch.cuda.synchronize(world.device)
        poison_layer(layer)
        poison_layer(ep1)
        if world.device.type == "cuda":
            torch.cuda.synchronize(world.device)
        world.barrier(f"poisoned before {name}")
        got = layer.forward(x, ids, w)
        want = oracle_outputs(cfg, shape, live_inputs(state))[world.rank]
        verdict.judge(world.rank, f"{cfg.recipe} {name}", got, want, ids, cfg.recipe)
        verdict.equal_bits(world.rank, f"{cfg.recipe} {name} vs EP1", got, ep1.forward(x, ids, w))
    return verdict
