"""Any MegaMoE behind the backend interface (``megamoe.backends``) as a benchmark arm, on the
``layer`` benchmark's cases: ``backend_layer(name, weighting)`` builds backend ``name``'s EP1
layer for the case's shape (bf16 recipe, the ``layer`` benchmark's shared weights and inputs,
the score applied where ``weighting`` says: docs/contract.md s5, s12), warms it up and times
``forward``. Its check: the first ``CHECK_TOKENS`` rows against the oracle within
docs/contract.md s8. It declares the ``layer`` benchmark's work (touched weight bytes up to
T = 64, FLOPs above), so every backend is read against the same ceilings.

The builders below are module attributes so that a remote arm's worker can import them
(``RemoteSpec("megamoe.bench.backend_layer:FLASHINFER_CAKE_LATE")``).
"""

from __future__ import annotations

from megamoe.bench.benchmarks.layer import CHECK_TOKENS, _inputs, _shape, _weights, _work
from megamoe.bench.registry import BuildContext, Builder, Case, Workload


def backend_layer(backend: str, weighting: str) -> Builder:
    """The builder of ``backend``'s layer with the score applied ``weighting`` (module
    docstring); a backend that refuses the case raises its refusal."""

    def build(case: Case, ctx: BuildContext) -> Workload:
        from megamoe.backends import WEIGHTINGS, LayerSpec, load_backend
        from megamoe.errors import ConfigError
        from oracle.compare import compare_rows
        from oracle.experts import moe_forward
        from oracle.moe_config import MoEConfig
        from oracle.weights import ExpertWeights

        s = _shape(case)
        t = case.shape["tokens"]
        cfg = MoEConfig("bf16", s.experts, s.top_k, s.hidden, s.inter, **WEIGHTINGS[weighting])
        spec, impl = LayerSpec(cfg, t), load_backend(backend)
        why = impl.refusal(spec, ctx.device, ctx.world_size)  # before any weight is made
        if why is not None:
            raise ConfigError("backend", f"a backend that builds {case.name}", why)
        w13, w2 = _weights(s, ctx.device)
        handle = impl.build(spec, w13, w2, device=ctx.device)
        x, ids, w = _inputs(case, ctx)
        handle.warmup(x, ids, w)

        def check() -> None:
            n = min(t, CHECK_TOKENS)
            want = moe_forward(x[:n], ids[:n], w[:n], ExpertWeights("bf16", w13, w2), cfg)
            report = compare_rows(handle.forward(x, ids, w)[:n], want, ids[:n], "bf16")
            if report.problems:
                raise AssertionError(f"{backend} {case.name}: {report.problems}")

        return Workload(lambda: handle.forward(x, ids, w), check=check,
                        **_work(case, ids))  # type: ignore[arg-type]

    build.__qualname__ = f"backend_layer[{backend},{weighting}]"
    return build


MEGAMOE_LATE = backend_layer("megamoe", "late")
FLASHINFER_CAKE_LATE = backend_layer("flashinfer-sm90-cake", "late")
