"""``python -m megamoe.bench <name> [--quick] [--output-dir DIR] ...`` and ``--list``.

Exit status: 0 when every A/A control came out as noise, 3 when one did not
(the measurement cannot resolve differences at the declared resolution: the
records are still written, for diagnosis), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from megamoe.bench import output
from megamoe.bench.device import Backend, default_backend
from megamoe.bench.protocol import CACHE_MODES, FULL, QUICK, Protocol
from megamoe.bench.ranks import DistributedRanks, EmulatedRanks, RankGroup, SingleRank
from megamoe.bench.registry import load_benchmarks
from megamoe.bench.report import fmt_pct, fmt_us
from megamoe.bench.runner import run_benchmark

EXIT_CONTROL_NOT_NOISE = 3


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m megamoe.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?", help="benchmark to run (see --list)")
    ap.add_argument("--list", action="store_true", help="list the registered benchmarks")
    ap.add_argument("--quick", action="store_true", help="short run: quick cases, fewer pairs, smaller ceilings")
    ap.add_argument("--output-dir", type=Path, help="folder for the JSON, Markdown and PNG files")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="where to time: CUDA events on the GPU (default) or the host clock")
    ap.add_argument("--rounds", type=int,
                    help="AB/BA rounds per comparison (default: the protocol's, fewer with "
                    "--quick)")
    ap.add_argument("--pairs", type=int, help="AB or BA pairs per round")
    ap.add_argument("--warmup", type=int, help="untimed calls of each arm before timing")
    ap.add_argument("--calls", type=int, help="calls per timed sample")
    ap.add_argument("--no-graph", action="store_true", help="time an eager loop instead of a CUDA graph")
    ap.add_argument("--cache", choices=(*CACHE_MODES, "both"), default="both",
                    help="time with the L2 cache flushed before every sample (cold), not "
                    "flushed (warm), or both (default)")
    ap.add_argument("--no-control", action="store_true", help="skip the A/A control")
    ap.add_argument("--resolution", type=float, help="A/A control resolution (fraction)")
    ap.add_argument("--emulated-ranks", type=int,
                    help="P logical ranks driven by this one process on this device (under "
                    "torchrun every process is one rank of an EP world instead)")
    ap.add_argument("--no-plots", action="store_true",
                    help="write the JSON and Markdown report only")
    ap.add_argument(
        "--case", action="append", default=[], metavar="GLOB",
        help="run only the cases whose name matches GLOB (shell-style; repeatable)",
    )
    ap.add_argument(
        "--plot", type=Path, metavar="RECORD_JSON",
        help="render the report and plots of an existing record (into --output-dir, default its folder)",
    )
    return ap


def protocol_from_args(args: argparse.Namespace, graph: bool = True) -> Protocol:
    """The protocol the options ask for; ``graph`` False (a benchmark whose arms cannot be
    captured) times eager loops."""
    base = QUICK if args.quick else FULL
    changes: dict[str, object] = {
        k: v
        for k, v in {
            "rounds": args.rounds,
            "pairs": args.pairs,
            "warmup": args.warmup,
            "calls_per_sample": args.calls,
            "resolution": args.resolution,
        }.items()
        if v is not None
    }
    if args.no_graph or args.device == "cpu" or not graph:
        changes["graph"] = False
    if args.no_control:
        changes["aa_control"] = False
    if args.cache != "both":
        changes["caches"] = (args.cache,)
    return base.with_(**changes)


def _ranks(args: argparse.Namespace, backend: Backend, world: object = None) -> RankGroup:
    """The rank group of this run. Under torchrun the EP world (``megamoe.comm``, started by
    ``main``) gives the gloo group for the host barrier and the gather; the ranks' start
    events are lined up by a one-element NCCL all-reduce only in a real world (NCCL refuses
    two ranks on one GPU, so an emulated world aligns by the host barrier alone)."""
    if args.emulated_ranks is not None:
        return EmulatedRanks(args.emulated_ranks)
    if world is not None:
        import torch
        import torch.distributed as dist

        gate = None
        if backend.kind == "cuda" and getattr(world, "mode", "") == "real":
            nccl = dist.new_group(backend="nccl")
            token = torch.zeros(1, device=backend.device, dtype=torch.int32)
            gate = lambda: dist.all_reduce(token, group=nccl)  # noqa: E731  # untimed
        return DistributedRanks(dist.new_group(backend="gloo"), gate)
    return SingleRank()


def _print_summary(record: dict, paths: Sequence[Path]) -> None:
    for case in record["cases"]:
        for comp in case["comparisons"]:
            s = comp["summary"]
            print(
                f"{case['case']:>16} {case['cache']:>4} {comp['kind'].upper():>2} "
                f"{comp['a']} {fmt_us(s['median_s'][0])} us vs {comp['b']} {fmt_us(s['median_s'][1])} us  "
                f"gain {fmt_pct(s['gain'])} rounds [{', '.join(fmt_pct(g) for g in s['round_gains'])}]  "
                f"-> {s['verdict']}"
            )
    for c in record["ceilings"]:
        value = f"{c['value']:.4g} {c['unit']}" if c["available"] else f"unavailable ({c['reason']})"
        print(f"ceiling {c['name']}: {value}")
    for p in paths:
        print(f"wrote {p}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.plot is not None:
        record = json.loads(args.plot.read_text())
        for p in output.render_outputs(record, args.output_dir or args.plot.parent):
            print(f"wrote {p}")
        return 0
    benches = load_benchmarks()
    if args.list:
        width = max((len(n) for n in benches), default=0)
        for name, bench in benches.items():
            print(f"{name:<{width}}  {bench.description}")
        return 0
    if args.name is None:
        print("name: expected a benchmark name (see --list), got none", file=sys.stderr)
        return 2
    if args.name not in benches:
        print(f"name: expected one of {sorted(benches)}, got {args.name!r}", file=sys.stderr)
        return 2
    bench = benches[args.name]
    try:
        bench.cases_for(args.quick, args.case)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    protocol = protocol_from_args(args, graph=bench.graph)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1 and args.emulated_ranks is None
    world = None
    index = None
    if distributed:
        from megamoe.bench.ep_world import start_world

        world = start_world()  # this rank's device: its own GPU, or the one GPU it shares
        index = world.device.index
    backend = default_backend(args.device, index)
    ranks = _ranks(args, backend, world)
    record = run_benchmark(
        bench, backend, ranks, protocol, quick=args.quick, case_patterns=args.case, argv=argv
    )
    paths: list[Path] = []
    if ranks.is_writer:
        out_dir = args.output_dir or Path("out") / "bench" / bench.name
        plots = not args.no_plots and output.have_matplotlib()
        paths = output.write_outputs(record, out_dir, plots=plots)
        _print_summary(record, paths)
        if not args.no_plots and not plots:
            print(
                "matplotlib is not installed here: plots skipped; draw them elsewhere with "
                f"python -m megamoe.bench --plot {paths[0]} --output-dir DIR"
            )
    if record["control_is_noise"] is False:
        print(
            "A/A control is NOT noise: the run cannot resolve differences at the declared "
            f"resolution ({protocol.resolution:.2%}); do not trust its verdicts",
            file=sys.stderr,
        )
        return EXIT_CONTROL_NOT_NOISE
    return 0
