"""Session-27 tool (not a test, not a benchmark of record): the SASS opcode mix of MX GEMM
variants, to see what a decode change does to the instructions before timing it.

Each variant is compiled in its own process (the DSL reads ``CUTE_DSL_DUMP_DIR`` at import
and names every cubin after its launcher, so one dump directory holds one kernel), then
disassembled with ``cuobjdump -sass`` (or ``nvdisasm``: CUDA's tools; without either only
the code sections' instruction total is printed, from the ELF headers) and its opcodes counted (static counts: the decode loop,
unrolled, dominates the specialized kernels). Run it once per tree to compare two trees:

    PYTHONPATH=. python3 docs/wip/sass_mix.py --weights mxfp4 --n 4096 --k 7168 \\
        --configs m64n64s4wsrhb4 m64n64s3ws > patch.txt
    PYTHONPATH=$PWD/abase:$PYTHONPATH python3 docs/wip/sass_mix.py ... > main.txt

A name the format does not compile is parsed as in ``exp_decode_depth.py``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)")


def compile_one(weights: str, mode: str, n: int, k: int, name: str, dump: Path) -> Path:
    """Compile one variant in a child process that dumps its cubin into ``dump``."""
    env = dict(os.environ, CUTE_DSL_KEEP_CUBIN="1", CUTE_DSL_DUMP_DIR=str(dump),
               CUTE_DSL_CACHE_DIR=str(dump / "cache"), CUTE_DSL_ARCH="sm_90a")
    code = (  # the compile gate's lowering (tests.harness.compile_gate): no GPU needed
        "import sys; sys.path.insert(0, 'docs/wip')\n"
        "from pathlib import Path\n"
        "from exp_decode_depth import add_variants\n"
        "from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT, GateBuild\n"
        "from tests.harness.compile_gate import compile_one\n"
        f"add_variants({weights!r}, [{name!r}])\n"
        f"cfg = {{c.name: c for c in CONFIGS_BY_FORMAT[{weights!r}]}}[{name!r}]\n"
        f"g = GateBuild({weights!r}, {mode!r}, {n}, {k}, cfg)\n"
        f"r = compile_one(g.name, g.build, Path({str(dump)!r}))\n"
        "assert r.ok, r.reason\n"
    )
    # -P: no current directory in front of PYTHONPATH, so a tree put first there (main's
    # package in abase/) is the one compiled; session 27's script compiled the checkout twice
    subprocess.run([sys.executable, "-P", "-c", code], env=env, check=True)
    cubins = sorted(dump.glob("*.cubin"))
    if not cubins:
        raise SystemExit(f"{name}: no cubin in {dump}")
    return cubins[0]


def text_instructions(cubin: Path) -> int:
    """Instructions in the cubin's code sections (``.text.<kernel>``, 16 bytes each on
    sm_90), read from the ELF section headers: the count without a disassembler."""
    data = cubin.read_bytes()
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shentsize = int.from_bytes(data[0x3A:0x3C], "little")
    shnum = int.from_bytes(data[0x3C:0x3E], "little")
    shstrndx = int.from_bytes(data[0x3E:0x40], "little")

    def header(i: int) -> tuple[int, int, int]:  # (name offset, file offset, size)
        h = data[shoff + i * shentsize: shoff + (i + 1) * shentsize]
        return (int.from_bytes(h[0:4], "little"), int.from_bytes(h[0x18:0x20], "little"),
                int.from_bytes(h[0x20:0x28], "little"))

    strtab = header(shstrndx)[1]
    total = 0
    for i in range(shnum):
        name_off, _, size = header(i)
        name = data[strtab + name_off: data.index(b"\0", strtab + name_off)]
        if name.startswith(b".text."):
            total += size // 16
    return total


def opcodes(cubin: Path) -> collections.Counter:
    """Opcode counts of every kernel in ``cubin`` (without a disassembler on PATH, only the
    total, as ``?``)."""
    tool = shutil.which("cuobjdump") or shutil.which("nvdisasm")
    if tool is None:
        return collections.Counter({"?": text_instructions(cubin)})
    args = [tool, "-sass", str(cubin)] if tool.endswith("cuobjdump") else [tool, str(cubin)]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return collections.Counter(m.group(1) for m in _OPCODE.finditer(text))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default="mxfp4", choices=("mxfp4", "mxfp8", "nvfp4"))
    ap.add_argument("--mode", default="swiglu", choices=("swiglu", "plain"))
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=7168)
    ap.add_argument("--configs", nargs="+", required=True)
    args = ap.parse_args()
    for name in args.configs:
        with tempfile.TemporaryDirectory() as tmp:
            counts = opcodes(compile_one(args.weights, args.mode, args.n, args.k, name,
                                         Path(tmp)))
        top = ", ".join(f"{op} {c}" for op, c in counts.most_common(16))
        print(f"{args.weights} {name} N={args.n} K={args.k}: {sum(counts.values())} "
              f"instructions; {top}", flush=True)


if __name__ == "__main__":
    main()
