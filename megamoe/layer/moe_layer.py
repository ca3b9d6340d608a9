"""``MoELayer``: the MegaMoE layer on one GPU (EP1) or as one rank of an EP world, every
stage a CuTe DSL kernel (docs/contract.md s1-s9).

In an EP world (``world=``: a ``megamoe.comm.World``; rank r holds only the weights of its
experts ``[r*E_l, (r+1)*E_l)``) the forward adds the exchange of
``megamoe.layer.ep_exchange`` around the expert stages below: every rank's staged ids to every
rank, each route's A1 row, scales and score to its owner, the owner's GEMMs over the rows it
received, each term back to its source rank. The GEMM variants are the EP1 layer's (chosen
from the configuration, never from the world size), so every rank's rows are bitwise equal to
EP1's (docs/contract.md s7). Every rank takes part in every call (``warmup``, each forward, each
replay); a bad route raises ``RouteError`` on its rank after the step, a peer that never
arrives ``CommTimeoutError``.

One forward, for ``T <= C`` tokens (or a device live count under CUDA graphs):

1. **stage** (``megamoe.staging``): route value checks, routes staged into the workspace
   (ids int32, scores float32, masked scores ``+0.0``, rows ``[T, C)`` emptied), the bf16
   activations copied (docs/contract.md s2-s3);
2. **layout** (``megamoe.dispatch``): per-expert counts over active slots only, offsets and
   the stable order ``(expert, row, slot)`` of the routed slots (s3, s8);
3. **gather** (row permute): every routed slot's A1 row into its expert's segment of the
   GEMM input, each segment starting at a multiple of the GEMM's M tile; the slot's score
   beside it;
4. **FC1** (grouped GEMM, ``swiglu`` mode): ``h1 = A1 @ W13[e].T``, clamp, SwiGLU, early
   weighting, bf16 A2 (s5 steps 1-5);
5. **FC2** (grouped GEMM, ``plain`` mode): ``h2 = A2 @ W2[e].T``, late weighting, one bf16
   rounding per slot (s5 steps 5-7);

   The ``fp8_mxfp4`` recipe (s4 safe FP8 and MXFP4, s5) differs in four places: staging
   quantizes A1 to safe FP8 (payload and per-row ``d``); the gather widens each payload row
   to its exact bf16 values and moves its ``d`` beside it; both GEMMs read MXFP4 weights
   (decoded to bf16 inside the mainloop, exactly) and multiply the accumulators by the
   row's ``d`` first (FC1: before the clamp and SwiGLU); FC1 writes ``act`` in float32 and
   an **a2** stage quantizes each row to safe FP8 (the scale spans the whole ``I`` row,
   which no FC1 tile sees), giving FC2 its payload as exact bf16 values and its ``d``;
6. **scatter** (row permute): each slot's term to ``terms[row, slot]``;
7. **combine** (``megamoe.combine``): float32 sum of active slots in slot order, one bf16
   rounding; rows without an active slot exactly ``+0.0`` (s6).

Only glue that sizes nothing runs outside those kernels: a handful of capacity-shaped
PyTorch index operations between the layout and the gather (segment starts, destination
rows, the score gather). Nothing syncs with the host in a forward except the eager
``RouteError`` check, so a forward captured into a CUDA graph replays with new contents
of ``hidden``, ``topk_ids``, ``topk_weights`` and the live count (s9).

Bad metadata raises ``ConfigError`` before any launch; bad route values raise
``RouteError`` in eager mode (after the staging launch, before anything the caller owns is
written), and under capture mark the row (NaN output) and set the status word that
``check_errors`` reads. On a CPU device every stage takes its PyTorch path (same
semantics; used by the host tests).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from megamoe import combine as _combine
from megamoe import staging as _staging
from megamoe.comm import push as _push
from megamoe.comm import signal as _signal
from megamoe.comm.world import World
from megamoe.compile_once import capturing as _capturing
from megamoe.dispatch import api as _dispatch
from megamoe.errors import ConfigError, RouteError
from megamoe.experts import api as _gemm
from megamoe.experts.grouped_gemm_kernel import KernelConfig
from megamoe.experts.mxfp4 import Mxfp4Matrix
from megamoe.experts.mxfp8 import Mxfp8Matrix
from megamoe.layer import a2_quant as _a2
from megamoe.layer import permute as _permute
from megamoe.layer import route_glue as _glue
from megamoe.layer import weights as _weights
from megamoe.layer.config import LayerConfig
from megamoe.layer.ep_exchange import EpExchange
from megamoe.validation import ID_DTYPES, SCORE_DTYPES
from megamoe.workspace import GUARD_BYTES, StageFormat

STAGE_FORMATS = {"bf16": "bf16", "fp8_mxfp4": "safe_fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}
"""The staging format of each layer recipe's A1 (docs/contract.md s5 table)."""


class MoELayer:
    """The layer (module docstring). Build, ``warmup(...)``, then ``forward(...)``.

    ``w13`` ``[E, 2I, H]`` in the canonical layout (gate rows, then up rows) and ``w2``
    ``[E, H, I]``: bf16 for the ``bf16`` recipe; for ``fp8_mxfp4`` either float tensors (the
    layer quantizes them to MXFP4, mode ``rceil``) or prequantized ``Mxfp4Matrix`` weights.
    The layer keeps its own re-laid-out copies on ``device`` (the caller's tensors are never
    modified).
    """

    def __init__(self, config: LayerConfig, w13: torch.Tensor | Mxfp4Matrix | Mxfp8Matrix,
                 w2: torch.Tensor | Mxfp4Matrix | Mxfp8Matrix,
                 device: torch.device | str | None = None, *, world: World | None = None
                 ) -> None:
        if not isinstance(config, LayerConfig):
            raise ConfigError("config", "a megamoe.layer.LayerConfig", type(config).__name__)
        if world is not None and not isinstance(world, World):
            raise ConfigError("world", "None (EP1) or a megamoe.comm.World",
                              type(world).__name__)
        ranks = 1 if world is None else world.size
        if config.num_experts % ranks:
            raise ConfigError("config.num_experts", f"a multiple of the world size {ranks} "
                              "(E % P == 0)", config.num_experts)
        e_local = config.num_experts // ranks
        # rank r holds the weights of its experts only: [E_l, ...]
        _weights.check_weights(config, w13, w2, experts=e_local)
        self.config = config
        self.world = world
        self.device = torch.device(device if device is not None else
                                   (world.device if world is not None else "cuda"))
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if world is not None and self.device != world.device:
            raise ConfigError("device", f"the world's device {world.device}", self.device)
        c, k, e = config.capacity, config.top_k, config.num_experts
        h, i = config.hidden_size, config.intermediate_size
        dev = self.device
        self._mx = config.recipe == "fp8_mxfp4"  # safe-FP8 row scales beside A1 and A2
        self._mx8 = config.recipe == "mxfp8"  # block scales folded into bf16 A1 and A2
        self._nv = config.recipe == "nvfp4"  # block scales folded; g in a per-row pre-scale
        self._quantized = config.recipe != "bf16"  # float32 act and an a2 stage
        self._w13 = _weights.prepare_weights(config, w13, h, dev, gate_up=True)
        self._w2 = _weights.prepare_weights(config, w2, i, dev, gate_up=False)
        fmt = (StageFormat("mxfp8", config.mxfp8_elem, config.mxfp8_mode) if self._mx8
               else StageFormat(STAGE_FORMATS[config.recipe]))
        self._stage_ws = _staging.StagingWorkspace.create(c, k, h, fmt, dev,
                                                          guard_bytes=GUARD_BYTES)
        routes = c * k
        # EP1: the layout of this rank's routes feeds the GEMMs; EP: the exchange does
        # (megamoe.layer.ep_exchange), and the GEMMs read the receive buffer
        self._ep = None if world is None else EpExchange(world, self._stage_ws, e, h)
        self._layout_ws = (_dispatch.LayoutWorkspace(_dispatch.LayoutShape(1, c, k, e), dev)
                           if world is None else None)
        rows_in = routes if self._ep is None else self._ep.recv_rows
        self._m_cap = _gemm.capacity_rows(rows_in, e_local)
        # the GEMM variants, fixed by the config (never by a batch's live rows: s7)
        wk = _gemm.weight_kind(self._w13)
        self._fc1_cfg = _gemm.gemm_config(wk, 2 * i, routes, k=h, experts=e, tokens=c)
        self._fc2_cfg = _gemm.gemm_config(wk, h, routes, k=i, experts=e, tokens=c)
        self._a1 = torch.zeros(self._m_cap, h, dtype=torch.bfloat16, device=dev)
        self._a2 = torch.zeros(self._m_cap, i, dtype=torch.bfloat16, device=dev)
        # fp8_mxfp4: the rows' safe-FP8 scale wires (A1's gathered, A2's); nvfp4: each row's
        # g_act * g_weight[e] (one spare row: routes past the live count write there)
        mx_rows = self._m_cap + 1 if (self._mx or self._nv) else 0
        self._pre1 = torch.zeros(mx_rows, _gemm.PRE_LANES, dtype=torch.float32, device=dev)
        self._pre2 = torch.zeros(mx_rows, _gemm.PRE_LANES, dtype=torch.float32, device=dev)
        # quantized recipes: FC1's float32 act, quantized to A2 by the a2 stage
        q_rows = self._m_cap if self._quantized else 0
        self._act = torch.zeros(q_rows, i if self._quantized else 0, dtype=torch.float32,
                                device=dev)
        # nvfp4: the activations' global scales as float32 device scalars
        self._g_in = torch.tensor(config.nvfp4_input_scale, dtype=torch.float32, device=dev)
        self._g_a2 = torch.tensor(config.nvfp4_a2_scale, dtype=torch.float32, device=dev)
        self._h2 = torch.zeros(self._m_cap, h, dtype=torch.bfloat16, device=dev)
        # one spare entry: routes i >= N write their (unused) score there
        self._row_scale = torch.zeros(self._m_cap + 1, dtype=torch.float32, device=dev)
        self._terms = (torch.zeros(routes, h, dtype=torch.bfloat16, device=dev)
                       if self._ep is None else None)  # EP: the symmetric terms region
        self._out = torch.zeros(c, h, dtype=torch.bfloat16, device=dev)
        self._counts = torch.zeros(e_local, dtype=torch.int32, device=dev)
        self._seg = torch.zeros(e_local + 1, dtype=torch.int32, device=dev)
        self._rows = torch.arange(c, dtype=torch.int64, device=dev)
        self._src_row = torch.zeros(rows_in, dtype=torch.int64, device=dev)
        self._pos = torch.zeros(rows_in, dtype=torch.int64, device=dev)
        self._term_row = torch.zeros(rows_in, dtype=torch.int64, device=dev)
        self._live = torch.zeros(1, dtype=torch.int32, device=dev)
        self._g_act = torch.stack((self._g_in, self._g_a2))
        self._tables = _glue.RouteTables(
            self._counts, self._seg, self._src_row, self._pos, self._term_row, self._row_scale,
            (self._pre1, self._pre2) if self._nv else None,
        )
        self._warm = False
        self._destroyed = False
        self._route_error: RouteError | None = None
        self.last_paths: dict[str, str] | None = None
        """Stage name -> the path it took (``"kernel"`` or ``"torch"``) in the last forward."""

    # ------------------------------------------------------------------ checks

    def _alive(self) -> None:
        if self._destroyed:
            raise ConfigError("layer", "a layer that has not been destroyed", "destroyed")

    def _check_inputs(self, hidden, topk_ids, topk_weights, live_tokens, out) -> int:
        """Metadata checks before any launch (docs/contract.md s1, s2); returns T."""
        cfg = self.config
        for name, t in (("hidden", hidden), ("topk_ids", topk_ids),
                        ("topk_weights", topk_weights)):
            if not isinstance(t, torch.Tensor):
                raise ConfigError(name, "a torch.Tensor", type(t).__name__)
            if t.device != self.device:
                raise ConfigError(f"{name}.device", str(self.device), str(t.device))
        if hidden.dtype != torch.bfloat16:
            raise ConfigError("hidden.dtype", f"torch.bfloat16 (recipe {cfg.recipe} quantizes "
                              "its own A1)" if cfg.recipe != "bf16" else
                              "torch.bfloat16 (recipe bf16)", hidden.dtype)
        if hidden.dim() != 2 or hidden.shape[1] != cfg.hidden_size:
            raise ConfigError("hidden.shape", f"[T, H={cfg.hidden_size}]", tuple(hidden.shape))
        t = hidden.shape[0]
        if t > cfg.capacity:
            raise ConfigError("hidden.shape[0]", f"T <= capacity {cfg.capacity}", t)
        if topk_ids.dtype not in ID_DTYPES:
            raise ConfigError("topk_ids.dtype", "torch.int32 or torch.int64", topk_ids.dtype)
        if topk_weights.dtype not in SCORE_DTYPES:
            raise ConfigError("topk_weights.dtype", f"one of {SCORE_DTYPES}",
                              topk_weights.dtype)
        for name, x in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
            if tuple(x.shape) != (t, cfg.top_k):
                raise ConfigError(f"{name}.shape", (t, cfg.top_k), tuple(x.shape))
        if live_tokens is not None:
            if not isinstance(live_tokens, torch.Tensor):
                raise ConfigError("live_tokens", "None or an int32 [1] tensor",
                                  type(live_tokens).__name__)
            if live_tokens.dtype != torch.int32 or live_tokens.numel() != 1:
                raise ConfigError("live_tokens", "an int32 [1] tensor",
                                  f"{live_tokens.dtype} {tuple(live_tokens.shape)}")
            if live_tokens.device != self.device:
                raise ConfigError("live_tokens.device", str(self.device),
                                  str(live_tokens.device))
        if out is not None:
            if not isinstance(out, torch.Tensor):
                raise ConfigError("out", "None or a torch.Tensor", type(out).__name__)
            if out.dtype != torch.bfloat16 or out.dim() != 2 or out.shape[1] != cfg.hidden_size:
                raise ConfigError("out", f"bf16 [>= T, H={cfg.hidden_size}]",
                                  f"{out.dtype} {tuple(out.shape)}")
            if out.shape[0] < t:
                raise ConfigError("out.shape[0]", f">= T = {t}", out.shape[0])
            if out.device != self.device:
                raise ConfigError("out.device", str(self.device), str(out.device))
            if out.shape[1] > 1 and out.stride(1) != 1:
                raise ConfigError("out.stride(1)", 1, out.stride(1))
        return t

    # ------------------------------------------------------------------ API

    def warmup(self, hidden: torch.Tensor, topk_ids: torch.Tensor,
               topk_weights: torch.Tensor) -> torch.Tensor:
        """Compile every kernel for these inputs' dtypes, allocate, and run one eager
        forward (returned). Call before capturing a forward (docs/contract.md s9)."""
        self._alive()
        self._check_inputs(hidden, topk_ids, topk_weights, None, None)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise _staging.CompileDuringCaptureError(
                "MoELayer.warmup() called during CUDA-graph capture (docs/contract.md s9)"
            )
        _staging.warmup(self._stage_ws, id_dtypes=(topk_ids.dtype,),
                        score_dtypes=(topk_weights.dtype,))
        if self.device.type == "cuda":
            _dispatch.warmup(self.device)
            _glue.warmup(self.device)
            _permute.warmup(self.device, torch.int64, torch.int64)
            _permute.warmup(self.device, torch.int64, torch.int32)
            cfg = self.config
            h, i = cfg.hidden_size, cfg.intermediate_size
            if self._quantized:
                wk = "mxfp4" if self._mx else "mxfp8"
                if self._mx:
                    _permute.warmup(self.device, torch.int64, torch.int32, widen=True)
                    _a2.warmup(self.device)
                elif self._nv:
                    wk = "nvfp4"
                    _permute.warmup(self.device, torch.int64, torch.int32, nvfp4=True)
                    _a2.warmup(self.device, nvfp4=True)
                else:
                    _permute.warmup(self.device, torch.int64, torch.int32,
                                    mx_elem=cfg.mxfp8_elem)
                    _a2.warmup(self.device, mxfp8=(cfg.mxfp8_elem, cfg.mxfp8_mode))
                _gemm.warmup("swiglu", 2 * i, h, self.device, self._fc1_cfg, weights=wk,
                             out_dtype=torch.float32)
                _gemm.warmup("plain", h, i, self.device, self._fc2_cfg, weights=wk)
            else:
                _gemm.warmup("swiglu", 2 * i, h, self.device, self._fc1_cfg)
                _gemm.warmup("plain", h, i, self.device, self._fc2_cfg)
            _combine.warmup(self.device, id_dtypes=(torch.int32,))
            if self._ep is not None:
                _push.warmup(self.device)
                _signal.warmup(self.device)
        self._warm = True
        return self.forward(hidden, topk_ids, topk_weights)

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor,
                topk_weights: torch.Tensor, *, live_tokens: torch.Tensor | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """``out [T, H]`` bf16 (docs/contract.md s1-s6); see the module docstring.

        ``live_tokens`` (int32 ``[1]`` on the device): the live count for CUDA-graph replays
        with capacity-shaped inputs; rows ``>= live`` of ``out`` are then not written.
        ``out``: optional caller buffer ``[>= T, H]``; rows ``>= T`` are never written.
        """
        self._alive()
        t = self._check_inputs(hidden, topk_ids, topk_weights, live_tokens, out)
        if not self._warm:
            raise ConfigError("layer", "warmup(...) called before forward", "not warmed up")
        if self.world is not None and self.world.failure is not None:
            raise ConfigError("world", "a world whose waits never timed out (destroy the "
                              "layer and the world)", f"failed: {self.world.failure}")
        cfg = self.config
        if out is None:
            out = torch.empty(t, cfg.hidden_size, dtype=torch.bfloat16, device=self.device)
        paths: dict[str, str] = {}
        self._route_error = None
        for name, run in self.stage_plan(hidden, topk_ids, topk_weights, live_tokens, out):
            paths[name] = run()
        self.last_paths = paths
        if self._ep is not None and not _capturing(self.device):
            # EP: the step is complete on every rank; now report what went wrong here
            timeout = self._ep.timeout()
            if timeout is not None:
                raise timeout
            if self._route_error is not None:
                raise self._route_error
        return out

    def stage_plan(self, hidden: torch.Tensor, topk_ids: torch.Tensor,
                   topk_weights: torch.Tensor, live_tokens: torch.Tensor | None,
                   out: torch.Tensor) -> list[tuple[str, Callable[[], str]]]:
        """The forward as ``(stage name, run)`` pairs, in order (``run()`` launches the stage
        and returns the path it took). ``forward`` runs them all; the per-stage benchmark
        captures and times each one alone (each stage only reads what earlier stages wrote,
        so replaying one stage repeats the same work). Inputs are not checked here."""
        cfg = self.config
        t = hidden.shape[0]
        ws = self._stage_ws
        ep = self._ep
        early = None if cfg.late_weighting else self._row_scale[: self._m_cap]
        late = self._row_scale[: self._m_cap] if cfg.late_weighting else None
        terms = (self._terms.view(cfg.capacity, cfg.top_k, cfg.hidden_size) if ep is None
                 else ep.terms)
        pre1 = self._pre1[: self._m_cap] if (self._mx or self._nv) else None
        pre2 = self._pre2[: self._m_cap] if (self._mx or self._nv) else None
        # the rows the expert stages walk: this rank's routes (EP1) or the received ones
        n = self._layout_ws.view("num_routes") if ep is None else ep.recv_count
        payload = ws.payload if ep is None else ep.recv_payload
        scales = ws.scales if ep is None else ep.recv_scales

        def stage() -> str:
            extra = {"global_scale": cfg.nvfp4_input_scale} if self._nv else {}
            try:
                return _staging.stage(ws, hidden, topk_ids, topk_weights,
                                      num_experts=cfg.num_experts, live_tokens=live_tokens,
                                      **extra).path
            except RouteError as err:
                if ep is None:
                    raise
                # EP: the bad rows are marked (NaN outputs); every rank finishes the step
                # before this rank raises (docs/contract.md s7)
                self._route_error = err
                return ws.last_path or "kernel"

        def layout() -> str:
            lay = _dispatch.dispatch_layout(ws.ids, cfg.num_experts, 1,
                                            workspace=self._layout_ws)
            self._route_indices(lay, ws.scores, cfg.top_k)
            return lay.path

        def gather() -> str:
            if self._nv:
                return _permute.widen_nvfp4_rows(payload, scales, self._a1,
                                                 self._src_row, self._pos, n)
            if self._mx8:
                return _permute.widen_mx_rows(payload, scales, self._a1, self._src_row,
                                              self._pos, n, cfg.mxfp8_elem)
            if not self._mx:
                return _permute.permute_rows(payload, self._a1, self._src_row, self._pos, n)
            path = _permute.widen_rows(payload, self._a1, self._src_row, self._pos, n)
            scale_path = _permute.permute_rows(scales, self._pre1, self._src_row, self._pos,
                                               n)
            return path if path == scale_path else f"{path}+{scale_path}"

        def fc1() -> str:
            return _gemm.grouped_gemm(
                self._a1, self._w13, self._seg, self._counts,
                self._act if self._quantized else self._a2, mode="swiglu", row_scale=early,
                clamp=cfg.clamp, pre_scale=pre1, config=self._fc1_cfg,
            )

        def a2() -> str:  # the GEMM rows of the routes, as the gathers walk them
            if self._nv:
                return _a2.quantize_a2_nvfp4(self._act, self._a2, self._pos, n,
                                             cfg.nvfp4_a2_scale)
            if self._mx8:
                return _a2.quantize_a2_mxfp8(self._act, self._a2, self._pos, n,
                                             cfg.mxfp8_elem, cfg.mxfp8_mode)
            return _a2.quantize_a2_safe_fp8(self._act, self._a2, pre2, self._pos, n)

        def fc2() -> str:
            return _gemm.grouped_gemm(self._a2, self._w2, self._seg, self._counts, self._h2,
                                      mode="plain", row_scale=late,
                                      pre_scale=pre2, config=self._fc2_cfg)

        def scatter() -> str:
            return _permute.permute_rows(self._h2, self._terms, self._pos, self._term_row, n)

        def combine() -> str:
            # a forward that will raise a RouteError (EP, eager) writes nothing the caller
            # owns: its rows (the bad ones NaN) go to the layer's own buffer
            failed = self._route_error is not None
            target = out if live_tokens is None and not failed else self._out
            plan = _combine.combine_plan(terms, ws.ids, target, t)
            _combine.masked_combine(terms, ws.ids, target, t)
            if live_tokens is not None and not failed:
                torch.clamp(live_tokens, 0, t, out=self._live)
                _permute.permute_rows(self._out, out, self._rows, self._rows, self._live)
            return "torch" if plan == _combine.PLAN_TORCH else "kernel"

        experts = [("gather", gather), ("fc1", fc1), ("fc2", fc2)]
        if self._quantized:
            experts.insert(2, ("a2", a2))
        if ep is None:
            return [("stage", stage), ("layout", layout), *experts, ("scatter", scatter),
                    ("combine", combine)]

        def recv_tables() -> str:
            ep.recv_tables()
            self._route_indices(ep.recv_layout, ep.recv_scores, 1)
            return "torch"

        return [("stage", stage), ("exchange_ids", lambda: ep.exchange_ids(ws)),
                ("layout", lambda: ep.layouts(ws)), ("send_tables", ep.send_tables),
                ("dispatch", lambda: ep.dispatch(ws)), ("recv_tables", recv_tables), *experts,
                ("return", lambda: ep.give_back(self._h2, self._pos)), ("combine", combine)]

    __call__ = forward

    def _route_indices(self, lay, scores: torch.Tensor, top_k: int) -> None:
        """The route tables (``megamoe.layer.route_glue``): counts, padded segment starts,
        and for every routed slot ``i < N`` its source row, GEMM row and term row; its score
        into the GEMM row's scale (nvfp4: the row's global-scale products into the pre-scale
        wires). EP: ``lay`` is the receive buffer's local layout and ``scores`` the received
        scores (one per receive row)."""
        g = (_glue.GlobalScales(self._g_act, self._w13.global_scale, self._w2.global_scale)
             if self._nv else None)
        _glue.build_route_tables(lay, scores, top_k, self._tables, g)

    @property
    def gemm_configs(self) -> tuple[KernelConfig, KernelConfig]:
        """The FC1 and FC2 GEMM variants, chosen once from the config (weight kind, each
        GEMM's ``N`` and ``K``, the route capacity ``C * K`` and the expert count ``E``:
        ``megamoe.experts.api.gemm_config``), never from a batch, so no row's result depends
        on the other rows (docs/contract.md s7)."""
        return self._fc1_cfg, self._fc2_cfg

    def check_errors(self) -> None:
        """Raise ``RouteError`` for the first bad route recorded by forwards run under CUDA
        graphs (the status word), and clear the record; return quietly when none (syncs)."""
        self._alive()
        if self._ep is not None:
            timeout = self._ep.timeout()
            if timeout is not None:
                raise timeout
        _staging.check_errors(self._stage_ws)

    def destroy(self) -> None:
        """Release every buffer, this rank's symmetric workspace included (no collective:
        bounded also after a failed step); any later call raises ``ConfigError``."""
        if self._destroyed:
            return
        if self._ep is not None:
            self._ep.free()
            self._ep = None
        for name in ("_w13", "_w2", "_stage_ws", "_layout_ws", "_a1", "_a2", "_h2", "_pre1", "_g_in", "_g_a2",
                     "_pre2", "_act",
                     "_row_scale", "_terms", "_out", "_counts", "_seg", "_tables", "_g_act", "_rows",
                     "_src_row", "_pos", "_term_row", "_live"):
            setattr(self, name, None)
        self._destroyed = True
