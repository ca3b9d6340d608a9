"""Offline CuTe DSL compile gate: every registered kernel lowers to an sm_90a cubin, no GPU.

How it compiles without a GPU (nvidia-cutlass-dsl 4.3.5 and later): the gate
process sets ``CUTE_DSL_ARCH=sm_90a`` (so every builder targets Hopper),
``CUTE_DSL_KEEP_CUBIN=1``, ``CUTE_DSL_KEEP_PTX=1`` and ``CUTE_DSL_DUMP_DIR`` (so the
lowering pipeline writes each cubin and its PTX to disk), and installs the DSL's
post-compile hook (``cutlass.base_dsl.compiler.PostCompileHookContext`` on the DSL's
compiler provider). The hook runs right after the whole MLIR pipeline (through cubin
generation) and before the JIT engine would be created and the module
loaded (which needs ``cuInit``); it raises ``LoweredOffline`` so nothing is
loaded, on a CPU machine or a GPU one alike. Builders need no special code.

A kernel passes when its builder reached the hook (or returned) and the run
left at least one new cubin in the dump directory, every one an ELF for
``EM_CUDA`` whose SM is 90. Its PTX is checked for the PDL rule (``pdl_ptx``; the
result's ``pdl``, which the gate test requires empty for megamoe's kernels). Kernels come
from ``megamoe.kernel_registry.load_all()`` plus the sanitizer self-test kernels (so the
gate proves something before any production kernel exists).

Run as ``python -m tests.harness.compile_gate DUMP_DIR``: one JSON line per
kernel on stdout, with a digest of its machine code (``code_digest``). ``run_gate`` does
that in a fresh interpreter. ``python -m tests.harness.compile_gate --compare A B`` reads
two such outputs and names every kernel whose machine code differs: a refactor that must
leave the bits unchanged can show it on the CPU, before any GPU run. The gate traces with
``tests.harness.dsl_memos`` in place (``MEGAMOE_DSL_MEMOS=0`` leaves them out; the time
they save and the check that every kernel's machine code stays the same:
docs/engineering-notes.md "Qualification time", ``tests/host/test_compile_gate.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tests.harness.pdl_ptx import pdl_violations

GATE_ARCH = "sm_90a"
GATE_SM = 90
EM_CUDA = 190
DUMP_SUFFIXES = ("cubin", "ptx", "mlir")
"""What the DSL dumps per kernel into the gate's directory (MLIR only with ``CUTE_DSL_KEEP_IR``)."""
_ELF_MAGIC = b"\x7fELF"


class LoweredOffline(Exception):
    """Raised by the post-compile hook: lowering finished, stop before loading."""


@dataclass(frozen=True)
class GateResult:
    name: str
    ok: bool
    reason: str
    cubins: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    pdl: tuple[str, ...] = ()
    """Violations of the PDL rule in ``ptx`` (``tests.harness.pdl_ptx``); the gate test
    requires none for megamoe's kernels (the sanitizer self-test kernels do not keep it)."""
    code: str = ""
    """``code_digest`` of the kernel's cubins (in name order): equal digests mean the same
    machine code, so a refactor of a kernel's source can be shown to leave its bits
    unchanged without a GPU (``python -m tests.harness.compile_gate --compare A B``)."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def gate_environment(dump_dir: Path) -> dict[str, str]:
    """Environment for the gate process (see module docstring)."""
    return {
        **os.environ,
        "CUTE_DSL_ARCH": GATE_ARCH,
        "CUTE_DSL_KEEP_CUBIN": "1",
        "CUTE_DSL_KEEP_PTX": "1",
        "CUTE_DSL_DUMP_DIR": str(dump_dir),
    }


def cubin_sm(data: bytes) -> int | None:
    """The SM a CUDA ELF (cubin) is built for, or None when ``data`` is not one."""
    if len(data) < 52 or data[:4] != _ELF_MAGIC:
        return None
    little = data[5] == 1
    fmt = "<" if little else ">"
    (machine,) = struct.unpack_from(fmt + "H", data, 18)
    if machine != EM_CUDA:
        return None
    flags_off = 48 if data[4] == 2 else 36  # ELF64 / ELF32 e_flags
    (flags,) = struct.unpack_from(fmt + "I", data, flags_off)
    return flags & 0xFF


EIFMT_SVAL = 0x04
"""``.nv.info`` attribute format with a 16-bit size and that many bytes of value; every other
format (no value, byte, half word) takes 4 bytes in all."""
EIATTR_REGCOUNT = 0x2F
"""``.nv.info`` attribute: a kernel's registers per thread (value: u32 symbol, u32 count)."""


def _sections(data: bytes) -> Iterator[tuple[str, bytes]]:
    """``(name, contents)`` of every section of a little-endian ELF64 cubin."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:  # (name offset, file offset, size)
        base = shoff + i * shentsize
        name, = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, offset, size

    strtab = header(shstrndx)[1]
    for i in range(shnum):
        name, offset, size = header(i)
        end = data.index(b"\0", strtab + name)
        yield data[strtab + name:end].decode(), data[offset:offset + size]


CODE_SECTIONS = (".text", ".nv.info", ".nv.constant", ".nv.shared", ".nv.global", ".nv.callgraph")
"""Section name prefixes that ``code_digest`` reads: the instructions, the kernel attributes
(registers, parameter layout, barriers), constants and memory; not the symbol and string
tables or debug information, which carry source positions."""


def code_digest(cubins: list[bytes]) -> str:
    """SHA-256 over the ``CODE_SECTIONS`` of ``cubins`` (each section's name and contents, in
    section order, cubin after cubin)."""
    h = hashlib.sha256()
    for data in cubins:
        for name, body in _sections(data):
            if name.startswith(CODE_SECTIONS):
                h.update(name.encode() + b"\0" + len(body).to_bytes(8, "little") + body)
    return h.hexdigest()


def cubin_registers(data: bytes) -> list[int]:
    """Registers per thread of each kernel in a cubin, from the ``EIATTR_REGCOUNT`` entries
    of its ``.nv.info`` sections (what ptxas gave the kernel; the occupancy it allows is
    what the MX GEMMs' ``ctas_per_sm`` estimates). Hand-parsed with ``struct``, like
    ``cubin_sm``: no ELF library is installed on the CI machines, and a cubin needs only
    its section headers read."""
    if cubin_sm(data) is None or data[4] != 2 or data[5] != 1:
        raise ValueError("cubin: expected a little-endian ELF64 CUDA cubin")
    counts = []
    for name, body in _sections(data):
        if not name.startswith(".nv.info"):
            continue
        i = 0
        while i + 4 <= len(body):
            fmt, attr, size = struct.unpack_from("<BBH", body, i)
            if fmt != EIFMT_SVAL:
                i += 4
                continue
            if attr == EIATTR_REGCOUNT:
                counts.append(struct.unpack_from("<I", body, i + 8)[0])
            i += 4 + size
    return counts


@contextmanager
def stop_after_lowering() -> Iterator[list[int]]:
    """Install the post-compile hook; yields a list that counts completed lowerings."""
    from cutlass.base_dsl.compiler import PostCompileHookContext
    from cutlass.cutlass_dsl import CuTeDSL

    lowered: list[int] = []

    def hook(_module: object) -> None:
        lowered.append(1)
        raise LoweredOffline

    with PostCompileHookContext(CuTeDSL._get_dsl().compiler_provider, hook):
        yield lowered


def _caused_by_lowered(exc: BaseException) -> bool:
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, LoweredOffline):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def judge_cubins(name: str, new_files: list[Path], reached: bool) -> GateResult:
    """Pass only with >= 1 new cubin, each an EM_CUDA ELF for ``GATE_SM``."""
    cubins = tuple(sorted(p.name for p in new_files))
    if not reached:
        return GateResult(name, False, "the builder never completed a compile", cubins)
    if not new_files:
        return GateResult(name, False, "lowering wrote no cubin", cubins)
    for p in new_files:
        sm = cubin_sm(p.read_bytes())
        if sm != GATE_SM:
            return GateResult(name, False, f"{p.name}: built for SM {sm}, expected {GATE_SM}",
                              cubins)
    return GateResult(name, True, f"{len(new_files)} sm_{GATE_SM} cubin(s)", cubins)


def compile_one(name: str, build: Callable[[], object], dump_dir: Path,
                hook: Callable[[], object] = stop_after_lowering) -> GateResult:
    """Run one builder under the hook and judge the cubins it left in ``dump_dir``.

    ``dump_dir`` belongs to the gate: the dumps of earlier kernels (cubin, PTX, and MLIR where
    ``CUTE_DSL_KEEP_IR`` keeps it) are removed first (two kernels may share a launcher name,
    hence a file name).
    """
    for old in [p for suffix in DUMP_SUFFIXES for p in dump_dir.glob(f"*.{suffix}")]:
        old.unlink()
    try:
        with hook() as lowered:  # type: ignore[attr-defined]
            try:
                build()
                reached = True
            except Exception as exc:
                if not _caused_by_lowered(exc):
                    tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                    return GateResult(name, False, f"compile failed: {tail[-2000:]}")
                reached = bool(lowered)
    except Exception as exc:  # the hook itself could not be installed
        return GateResult(name, False, f"gate could not hook the DSL: {exc!r}")
    cubins = sorted(dump_dir.glob("*.cubin"))
    result = judge_cubins(name, cubins, reached)
    ptx = sorted(dump_dir.glob("*.ptx"))
    pdl = [v for p in ptx for v in pdl_violations(p.read_text(errors="replace"))]
    code = code_digest([p.read_bytes() for p in cubins]) if result.ok else ""
    return replace(result, ptx=tuple(p.name for p in ptx), pdl=tuple(pdl), code=code)


def gate_builders() -> dict[str, Callable[[], object]]:
    """Registered production kernels plus the sanitizer self-test kernels."""
    from megamoe.kernel_registry import load_all
    from sanitizers.selftest_kernels import builders

    out = {name: entry.build for name, entry in sorted(load_all().items())}
    out.update(builders())
    return out


def run_gate(python: str, root: Path, dump_dir: Path, timeout_s: float = 900) -> list[GateResult]:
    """Run the gate in a fresh interpreter (the DSL reads its environment once)."""
    dump_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [python, "-m", "tests.harness.compile_gate", str(dump_dir)], cwd=root,
        env=gate_environment(dump_dir), capture_output=True, text=True, timeout=timeout_s,
        check=False,
    )
    results = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            results.append(GateResult(d["name"], d["ok"], d["reason"], tuple(d["cubins"]),
                                      tuple(d["ptx"]), tuple(d["pdl"]), d.get("code", "")))
    if proc.returncode not in (0, 1) or not results:
        results.append(GateResult("<gate process>", False,
                                  f"exit {proc.returncode}: {proc.stderr[-3000:]}"))
    return results


def code_changes(before: list[dict], after: list[dict]) -> list[str]:  # type: ignore[type-arg]
    """Kernels whose machine code differs between two gate runs (their JSON lines), or that
    only one run compiled, one line each."""
    a = {d["name"]: d.get("code", "") for d in before}
    b = {d["name"]: d.get("code", "") for d in after}
    out = [f"{n}: only in the first run" for n in sorted(a.keys() - b.keys())]
    out += [f"{n}: only in the second run" for n in sorted(b.keys() - a.keys())]
    out += [f"{n}: no machine code to compare" for n in sorted(a.keys() & b.keys())
            if not a[n] or not b[n]]
    out += [f"{n}: machine code differs" for n in sorted(a.keys() & b.keys())
            if a[n] and b[n] and a[n] != b[n]]
    return out


def _json_lines(path: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in Path(path).read_text().splitlines()
            if line.startswith("{")]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"]:
        if len(argv) != 3:
            raise SystemExit("usage: python -m tests.harness.compile_gate --compare A.jsonl B.jsonl")
        changes = code_changes(_json_lines(argv[1]), _json_lines(argv[2]))
        print("\n".join(changes) or "the same machine code for every kernel")
        return 1 if changes else 0
    dump_dir = Path(argv[0]).resolve()
    dump_dir.mkdir(parents=True, exist_ok=True)
    env = gate_environment(dump_dir)
    if any(os.environ.get(k) != env[k] for k in ("CUTE_DSL_ARCH", "CUTE_DSL_KEEP_CUBIN",
                                                 "CUTE_DSL_KEEP_PTX", "CUTE_DSL_DUMP_DIR")):
        # started by hand without the gate's environment: the DSL reads it once, at
        # import, so start again with it (``run_gate`` sets it up front)
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "tests.harness.compile_gate",
                                   str(dump_dir)], env)
    from tests.harness.dsl_memos import install as install_dsl_memos

    builders = gate_builders()
    install_dsl_memos()  # the same machine code in about half the time (module docstring)
    ok = True
    for name, build in builders.items():
        result = compile_one(name, build, dump_dir)
        ok &= result.ok
        print(json.dumps(result.as_dict()), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
