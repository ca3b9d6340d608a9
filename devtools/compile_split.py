"""How much of a kernel's compile is the trace (issue 40 item 11): each of the compile gate's
builders (``tests.harness.compile_gate``) lowered offline, with the wall time spent in the
DSL's ``BaseDSL.generate_original_ir`` (running the kernel's Python to build its MLIR) beside
the whole compile up to the cubin.

    python -m devtools.compile_split [--count N] [--seed S] [--match TEXT]
                                     [--memos dsl|memo] [--fingerprint]

Run it from the repository root on any machine with the CuTe DSL (no GPU): it sets the gate's
environment (``gate_environment``) and re-runs itself, since the DSL reads its environment
once. ``--count`` builders of a seeded shuffle (the sanitizer self-tests left out), or those
whose name holds a ``--match`` (repeatable). The shared compile cache of ``qualify.py
--share-compiles`` saves only the part that is not the trace (docs/engineering-notes.md
"Qualification time").

``--memos memo`` traces with three of the DSL's lookups made once per distinct input
(``tests.harness.dsl_memos``), ``dsl`` (the default) as the DSL does. ``--fingerprint`` also
keeps each kernel's MLIR and prints one line, ``fingerprint LOCATIONS OUTPUTS``: a digest of
every source location the trace built (file, line, column and text, in order) and one of every
MLIR, PTX and cubin byte, so two runs that differ only in ``--memos`` can be compared. The
``planted-*`` choices key one memo wrongly (the instruction offset left out of the frame key,
one key for every module, one for every type), for the tests to show that the fingerprint or
the compile catches it."""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

CHILD_ENV = "MEGAMOE_COMPILE_SPLIT_CHILD"


MEMOS = ("dsl", "memo", "planted-frames", "planted-modules", "planted-types")


def _fingerprint_locations(digest: hashlib._Hash) -> None:
    """Feed every location the DSL's op module builds into ``digest`` (``--fingerprint``)."""
    from cutlass.base_dsl._mlir_helpers import op

    real = op.ir

    class Location:
        @staticmethod
        def file(*args):  # type: ignore[no-untyped-def]
            digest.update(repr(("file", args)).encode())
            return real.Location.file(*args)

        @staticmethod
        def name(text, childLoc=None):  # type: ignore[no-untyped-def]
            digest.update(repr(("name", text)).encode())
            return real.Location.name(text, childLoc=childLoc)

    op.ir = types.SimpleNamespace(Location=Location)


def _install_memos(kind: str) -> None:
    from tests.harness.dsl_memos import EVERY_MEMO, MemoKeys, install

    if kind == "dsl":
        return
    planted = {
        "memo": MemoKeys(),
        "planted-frames": MemoKeys(
            frame=lambda frame, context: (frame.f_code.co_filename, frame.f_code, context)),
        "planted-modules": MemoKeys(module=lambda module: "every module"),
        "planted-types": MemoKeys(type=lambda mlir_type: "every type"),
    }
    if install({}, planted[kind]) != EVERY_MEMO:
        raise SystemExit(f"--memos {kind}: the memos do not install under this DSL")


def _measure(args: argparse.Namespace, dump_dir: Path) -> int:
    from cutlass.base_dsl import dsl

    from tests.harness.compile_gate import DUMP_SUFFIXES, compile_one, gate_builders

    _install_memos(args.memos)
    located, outputs = hashlib.sha256(), hashlib.sha256()
    if args.fingerprint:
        _fingerprint_locations(located)
    traced = [0.0]
    original = dsl.BaseDSL.generate_original_ir

    def timed(self, *a, **k):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            traced[0] += time.perf_counter() - t0

    dsl.BaseDSL.generate_original_ir = timed  # type: ignore[method-assign]
    builders = gate_builders()
    names = [n for n in sorted(builders) if not n.startswith("sanitizer")]
    if args.match:
        names = [n for n in names if any(text in n for text in args.match)]
    else:
        random.Random(args.seed).shuffle(names)
        names = names[:args.count]
    total = trace = 0.0
    print("| kernel | compile s | trace s |\n|---|---|---|")
    for name in names:
        traced[0] = 0.0
        t0 = time.perf_counter()
        result = compile_one(name, builders[name], dump_dir)
        took = time.perf_counter() - t0
        if not result.ok:
            print(f"{name}: {result.reason}", file=sys.stderr)
            return 1
        for suffix in DUMP_SUFFIXES:
            for path in sorted(dump_dir.glob(f"*.{suffix}")):
                outputs.update(path.read_bytes())
        total, trace = total + took, trace + traced[0]
        print(f"| `{name}` | {took:.2f} | {traced[0]:.2f} |")
    share = 100 * trace / total if total else 0.0
    print(f"\n{len(names)} kernels: compile {total:.1f} s, trace {trace:.1f} s ({share:.0f} %), "
          f"memos {args.memos}")
    if args.fingerprint:
        print(f"fingerprint {located.hexdigest()} {outputs.hexdigest()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--match", action="append", default=[],
                    help="builders whose name holds this text (repeat for several)")
    ap.add_argument("--memos", choices=MEMOS, default="dsl",
                    help="trace with tests.harness.dsl_memos (memo), without (dsl), or planted")
    ap.add_argument("--fingerprint", action="store_true",
                    help="print digests of every location built and every output byte")
    args = ap.parse_args(argv)
    if os.environ.get(CHILD_ENV):
        return _measure(args, Path(os.environ[CHILD_ENV]))
    from tests.harness.compile_gate import gate_environment

    with tempfile.TemporaryDirectory(prefix="compile-split-") as tmp:
        env = {**os.environ, **gate_environment(Path(tmp)), CHILD_ENV: tmp,
               **({"CUTE_DSL_KEEP_IR": "1"} if args.fingerprint else {})}
        cmd = [sys.executable, "-m", "devtools.compile_split", *(argv or sys.argv[1:])]
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
