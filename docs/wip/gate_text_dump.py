"""Session 35 (host, no GPU): the machine code of registered kernels, for comparing two trees.

Compiles every kernel of the compile gate (``tests.harness.compile_gate.gate_builders``)
whose name holds one of the given substrings, for the gate's arch, and writes each cubin's
``.text`` sections to ``OUT/<kernel>.<cubin stem>.text``. Run it in each tree with the gate's
environment (``gate_environment``: the DSL reads it once, at import) and its own DSL cache,
then ``cmp`` the two directories' files. Session 35 ran it on ``a7ce16a`` (kernel digest
``c83d7f3b61e3``) and on the folded E4M3 decode (``681b4e641fab``): every ``mxfp4`` and
``nvfp4`` kernel the same, every ``grouped_gemm_mxfp8`` kernel different (docs/perf.md
"Session 35" item 4). From the tree's root:

    env CUTE_DSL_ARCH=sm_90a CUTE_DSL_KEEP_CUBIN=1 CUTE_DSL_KEEP_PTX=1 \
        CUTE_DSL_DUMP_DIR=/tmp/gd/dump CUTE_DSL_CACHE_DIR=/tmp/gcc PYTHONPATH=. \
        python docs/wip/gate_text_dump.py /tmp/gd mxfp4 nvfp4
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.harness import compile_gate as gate


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    dump = out / "dump"
    dump.mkdir(parents=True, exist_ok=True)
    ok = True
    for name, build in gate.gate_builders().items():
        if not any(s in name for s in argv[1:]):
            continue
        result = gate.compile_one(name, build, dump)
        ok &= result.ok
        for cubin in sorted(dump.glob("*.cubin")):
            text = b"".join(d for s, d in gate._sections(cubin.read_bytes())
                            if s.startswith(".text"))
            (out / f"{name}.{cubin.stem}.text").write_bytes(text)
        print(name, result.ok, result.reason, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
