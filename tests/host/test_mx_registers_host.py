"""The registers the MX occupancy model assumes against what ptxas gives the defaults.

``mxfp4_gemm_kernel.ctas_per_sm`` counts every thread with ``MX_REGISTERS_PER_THREAD`` (64)
registers, and ``MX_NARROW_DEPTHS`` takes a variant only where that many CTAs fit. ptxas
decides the real count, which moves with the code (session 27: the four-B-tile variant
``m64n64s4wsrhb4`` gets 67-71 registers at DeepSeek's shapes, past the model's 64), and
only the real count says whether the CTAs the rule counted on fit. So each default at the
two benchmark shapes, narrow (a small route capacity) and wide (no capacity: the 128-row
variants), is compiled as the layer compiles it (the compile gate's lowering, no GPU) and
its registers, rounded up to the hardware's allocation unit of 8 per thread, must leave room
for the CTAs ``ctas_per_sm`` counted.

By hand: a Hopper SM has 65 536 registers; a 64-row specialized MX CTA has 288 threads
(decode warpgroup, one MMA warpgroup, one TMA warp), so three CTAs fit up to 72 registers a
thread (3 x 288 x 72 = 62 208) and not from 73 (allocated as 80: 69 120). A 128-row
specialized CTA has 416 (two MMA warpgroups), so two fit up to 72 registers (2 x 416 x 72 =
59 904) and not from 73 (allocated as 80: 66 560); a non-specialized one has 256 (two
warpgroups that each decode and multiply), so two fit up to 128 (2 x 256 x 128 = 65 536).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from megamoe.experts import mxfp4_gemm_kernel as mk
from tests.harness.compile_gate import (
    EIATTR_REGCOUNT,
    EIFMT_SVAL,
    cubin_registers,
    gate_environment,
)
from tests.host.test_mx_pipeline_depth_host import (
    DEEPSEEK_FC1,
    DEEPSEEK_FC2,
    EXPERTS,
    GPTOSS_FC1,
    GPTOSS_FC2,
    SMALL_CAPACITY,
)

ROOT = Path(__file__).resolve().parents[2]
CTA_THREADS_64_ROW = 288  # by hand: 128 decode + 128 MMA + 32 TMA
CTA_THREADS = {  # by hand, per (tile_m, specialized)
    (64, True): CTA_THREADS_64_ROW,
    (128, True): 128 + 2 * 128 + 32,  # decode + two MMA warpgroups + TMA
    (128, False): 2 * 128,  # two warpgroups, each decoding and multiplying
}
CAPACITIES = {"narrow": SMALL_CAPACITY, "wide": None}
"""The route capacities the layer passes (over DeepSeek's ``EXPERTS``): a small one (the
64-row narrow defaults) and none (the 128-row defaults a large or unknown capacity gets)."""
ALLOCATION_UNIT = 8
"""Registers per thread are allocated in multiples of 8 (a warp's in units of 256)."""
SHAPES = {  # (mode, N, K, float32 output), as the layer compiles FC1 and FC2
    "deepseek-fc1": ("swiglu", *DEEPSEEK_FC1, True),
    "deepseek-fc2": ("plain", *DEEPSEEK_FC2, False),
    "gptoss-fc1": ("swiglu", *GPTOSS_FC1, True),
    "gptoss-fc2": ("plain", *GPTOSS_FC2, False),
}
CASES = [(w, shape, cap) for w in ("mxfp4", "nvfp4", "mxfp8") for shape in SHAPES
         for cap in CAPACITIES]


def ctas_by_registers(registers: int, threads: int = CTA_THREADS_64_ROW) -> int:
    """CTAs of ``threads`` threads that one SM's registers hold at ``registers`` a thread."""
    allocated = -(-registers // ALLOCATION_UNIT) * ALLOCATION_UNIT
    return mk.SM90_REGISTERS_PER_SM // (threads * allocated)


def _compile_in_child(cases: list[tuple[str, str, str]], dump_dir: Path) -> dict:
    """Each case's default compiled by the gate's lowering in a fresh interpreter (the DSL
    reads its environment once), ``{case: (variant, registers)}``."""
    code = f"""
import json
from pathlib import Path
from megamoe.experts import mxfp4_gemm_kernel as mk
from tests.harness.compile_gate import compile_one, cubin_registers
dump = Path({str(dump_dir)!r})
for weights, shape, cap, routes, mode, n, k, f32 in {[(w, s, c, CAPACITIES[c], *SHAPES[s])
                                                     for w, s, c in cases]!r}:
    cfg = mk.mx_default_config(n, weights, routes, k, {EXPERTS})
    g = mk.GateBuild(weights, mode, n, k, cfg, f32)
    r = compile_one(g.name, g.build, dump)
    regs = [cubin_registers((dump / c).read_bytes()) for c in r.cubins] if r.ok else []
    print(json.dumps({{"case": weights + "-" + shape + "-" + cap, "variant": cfg.name, "ok": r.ok,
                      "reason": r.reason, "registers": regs}}), flush=True)
"""
    dump_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          env=gate_environment(dump_dir), capture_output=True, text=True,
                          timeout=900, check=False)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            assert d["ok"], f"{d['case']} {d['variant']}: {d['reason']}"
            out[d["case"]] = (d["variant"], [n for regs in d["registers"] for n in regs])
    assert out, f"compile process: exit {proc.returncode}: {proc.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _compile_in_child(CASES, tmp_path_factory.mktemp("mx-registers"))


@pytest.mark.parametrize(("weights", "shape", "cap"), CASES,
                         ids=[f"{w}-{s}-{c}" for w, s, c in CASES])
def test_the_defaults_registers_leave_room_for_the_ctas_the_rule_counted(
        compiled: dict, weights: str, shape: str, cap: str) -> None:
    _, n, k, _ = SHAPES[shape]
    cfg = mk.mx_default_config(n, weights, CAPACITIES[cap], k, EXPERTS)
    variant, registers = compiled[f"{weights}-{shape}-{cap}"]
    assert variant == cfg.name and (cfg.tile_m == 64) == (cap == "narrow")
    assert cap == "wide" or cfg.specialized
    threads = CTA_THREADS[(cfg.tile_m, cfg.specialized)]
    assert len(registers) == 1, registers  # one kernel per GEMM
    assert ctas_by_registers(registers[0], threads) >= mk.ctas_per_sm(cfg, k, weights), (
        f"{cfg.name} at {shape}: {registers[0]} registers a thread leave room for "
        f"{ctas_by_registers(registers[0], threads)} CTAs, the rule counted "
        f"{mk.ctas_per_sm(cfg, k, weights)}")


def test_three_ctas_fit_up_to_72_registers_and_not_from_73() -> None:
    """The arithmetic the check above relies on, by hand (module docstring); a kernel at 73
    registers is the planted bug it must catch."""
    assert ctas_by_registers(63) == ctas_by_registers(72) == 3
    assert ctas_by_registers(73) == 2
    assert mk.ctas_per_sm(mk.KernelConfig(64, 4, tile_m=64, specialized=True,
                                          scale_regs=True, halves=True, b_tiles=4),
                          7168) == 3 > ctas_by_registers(73)


def test_two_128_row_specialized_ctas_fit_up_to_72_registers_and_not_from_73() -> None:
    """The same for the 128-row specialized CTA (MXFP4's wide default ``n64s4ws``, NVFP4's
    ``n64s4wsr``): two of 416 threads fit at 72 registers, one at 73; a wide default at 73 is
    the planted bug."""
    threads = CTA_THREADS[(128, True)]
    assert threads == 416
    assert ctas_by_registers(72, threads) == 2 and ctas_by_registers(73, threads) == 1
    wide = mk.mx_default_config(4096, "mxfp4", None, 7168)
    assert (wide.tile_m, wide.specialized) == (128, True)
    assert mk.ctas_per_sm(wide, 7168, "mxfp4") == 2 > ctas_by_registers(73, threads)
    assert ctas_by_registers(128, CTA_THREADS[(128, False)]) == 2


def _nv_info(entries: list[tuple[int, int, bytes]]) -> bytes:
    out = b""
    for fmt, attr, value in entries:
        if fmt == EIFMT_SVAL:
            out += struct.pack("<BBH", fmt, attr, len(value)) + value
        else:
            out += struct.pack("<BBH", fmt, attr, 0)
    return out


def _fake_cubin(sections: dict[str, bytes]) -> bytes:
    """A minimal little-endian ELF64 CUDA object: the named sections, a section-name table."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    body = b"".join(sections.values())
    data_off = 64
    shoff = data_off + len(body) + len(names)
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5] = 2, 1
    struct.pack_into("<H", header, 18, 190)  # EM_CUDA
    struct.pack_into("<I", header, 48, (90 << 16) | 90)
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, len(sections) + 2, len(sections) + 1)
    shdrs = bytearray(64)  # the null section
    offset, name_at = data_off, 1
    for name, content in [*sections.items(), (".shstrtab", names)]:
        sh = bytearray(64)
        struct.pack_into("<I", sh, 0, name_at)
        struct.pack_into("<QQ", sh, 0x18, offset, len(content))
        shdrs += sh
        offset += len(content)
        name_at += len(name) + 1
    return bytes(header) + body + names + bytes(shdrs)


def test_cubin_registers_reads_each_kernels_regcount_entry() -> None:
    info = _nv_info([(0x03, 0x1B, b""), (EIFMT_SVAL, EIATTR_REGCOUNT, struct.pack("<II", 5, 71)),
                     (EIFMT_SVAL, 0x12, struct.pack("<II", 5, 99))])  # another attribute
    cubin = _fake_cubin({".text.k": b"\0" * 16, ".nv.info.k": info})
    assert cubin_registers(cubin) == [71]
    assert cubin_registers(_fake_cubin({".text.k": b"\0" * 16})) == []
    with pytest.raises(ValueError, match="cubin"):
        cubin_registers(b"not an elf" + bytes(64))
