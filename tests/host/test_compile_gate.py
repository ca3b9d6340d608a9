"""Offline compile gate: every registered CuTe DSL kernel lowers to an sm_90a cubin on the CPU.

The gate (``tests.harness.compile_gate``) compiles ``megamoe.kernel_registry.load_all()``
plus the sanitizer self-test kernels in a fresh interpreter and stops each
compile right after lowering (no GPU, no driver). A new kernel module is
covered without editing this file.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from megamoe.kernel_registry import load_all
from sanitizers.selftest_kernels import builders as selftest_builders
from tests.harness import dsl_memos
from tests.harness.compile_gate import (
    EM_CUDA,
    GATE_SM,
    LoweredOffline,
    code_changes,
    code_digest,
    compile_one,
    cubin_sm,
    judge_cubins,
    run_gate,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gate_results(tmp_path_factory: pytest.TempPathFactory):
    return run_gate(sys.executable, ROOT, tmp_path_factory.mktemp("cubins"))


def test_every_registered_kernel_and_selftest_kernel_compiles_for_sm90a(gate_results) -> None:
    failed = [f"{r.name}: {r.reason}" for r in gate_results if not r.ok]
    assert not failed, "kernels that no longer compile for sm_90a:\n" + "\n".join(failed)


def test_gate_covers_the_whole_registry_and_all_selftest_kernels(gate_results) -> None:
    names = {r.name for r in gate_results}
    expected = set(load_all()) | set(selftest_builders())
    assert expected <= names
    assert len(selftest_builders()) == 8  # four tools x (planted, clean)


def test_every_megamoe_kernel_keeps_the_pdl_rule_in_its_ptx(gate_results) -> None:
    """megamoe.pdl: each registered kernel's PTX waits on its predecessor before any global
    access, in the entry block, and lets its dependents launch only after that."""
    ours = [r for r in gate_results if r.name in load_all()]
    assert ours and all(r.ptx for r in ours), "the gate kept no PTX to check"
    broken = [f"{r.name}: {v}" for r in ours for v in r.pdl]
    assert not broken, "kernels that break the PDL rule:\n" + "\n".join(broken)


def test_the_pdl_check_flags_real_kernels_that_do_not_wait(gate_results) -> None:
    """The planted case on real PTX: the sanitizer self-test kernels are plain CuTe DSL
    kernels without ``await_inputs()``; the same check must flag every one of them."""
    selftests = [r for r in gate_results if r.name in selftest_builders()]
    assert len(selftests) == 8
    assert all(r.ptx and any("no griddepcontrol.wait" in v for v in r.pdl) for r in selftests)


def _fake_cubin(sm: int, machine: int = EM_CUDA) -> bytes:
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4] = 2  # ELF64
    header[5] = 1  # little endian
    struct.pack_into("<H", header, 18, machine)
    struct.pack_into("<I", header, 48, (sm << 16) | sm)
    return bytes(header)


def test_cubin_sm_reads_the_sm_from_a_cuda_elf() -> None:
    assert cubin_sm(_fake_cubin(90)) == 90
    assert cubin_sm(_fake_cubin(80)) == 80
    assert cubin_sm(_fake_cubin(90, machine=62)) is None  # x86-64, not CUDA
    assert cubin_sm(b"not an elf at all, just text padding.......................") is None


def test_gate_fails_a_kernel_whose_build_raises(tmp_path: Path) -> None:
    def broken() -> object:
        raise TypeError("planted: kernel no longer type-checks")

    result = compile_one("broken", broken, tmp_path, hook=_counting_hook)
    assert not result.ok
    assert "planted: kernel no longer type-checks" in result.reason


def test_gate_fails_a_kernel_built_for_the_wrong_arch(tmp_path: Path) -> None:
    def wrong_arch() -> object:
        (tmp_path / "k.sm_80.cubin").write_bytes(_fake_cubin(80))
        raise LoweredOffline

    result = compile_one("wrong-arch", wrong_arch, tmp_path, hook=_counting_hook)
    assert not result.ok
    assert f"expected {GATE_SM}" in result.reason


def test_gate_fails_a_build_that_writes_no_cubin(tmp_path: Path) -> None:
    result = judge_cubins("silent", [], reached=True)
    assert not result.ok and "no cubin" in result.reason


def test_gate_passes_a_build_that_lowered_to_sm90(tmp_path: Path) -> None:
    def good() -> object:
        (tmp_path / "k.sm_90a.cubin").write_bytes(_fake_cubin(90))
        raise LoweredOffline

    assert compile_one("good", good, tmp_path, hook=_counting_hook).ok



def _elf(sections: dict[str, bytes]) -> bytes:
    """A little-endian ELF64 CUDA file holding ``sections`` (and its section name table)."""
    names = ["", *sections, ".shstrtab"]
    shstrtab = b"".join(n.encode() + b"\0" for n in names)
    bodies = [b"", *sections.values(), shstrtab]
    data = bytearray(_fake_cubin(90))
    offsets = []
    for body in bodies:
        offsets.append(len(data))
        data += body
    shoff = len(data)
    name_at = 0
    for body, off, name in zip(bodies, offsets, names, strict=True):
        data += struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, off, len(body), 0, 0, 1, 0)
        name_at += len(name) + 1
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(bodies), len(bodies) - 1)
    return bytes(data)


def test_the_code_digest_reads_machine_code_not_debug_information() -> None:
    """Planted changes: an instruction byte or a kernel attribute moves the digest; a debug
    section (source positions) does not."""
    base = {".text.k": bytes(range(64)), ".nv.info.k": b"\x04\x2f\x08\x00" + bytes(8),
            ".debug_frame": b"line 10"}
    digest = code_digest([_elf(base)])
    assert code_digest([_elf({**base, ".debug_frame": b"line 99"})]) == digest
    assert code_digest([_elf({**base, ".text.k": bytes(range(1, 65))})]) != digest
    assert code_digest([_elf({**base, ".nv.info.k": b"\x04\x2f\x08\x00" + bytes(7) + b"1"})]) != digest
    assert code_digest([_elf(base), _elf(base)]) != digest  # a second cubin counts


def test_every_compiled_kernel_has_a_code_digest_that_tells_kernels_apart(gate_results) -> None:
    ok = [r for r in gate_results if r.ok]
    assert ok and all(len(r.code) == 64 for r in ok)
    by_name = {r.name: r.code for r in ok}
    # two configurations of one kernel (top-k 8 / int64 ids vs top-k 1 / int32 ids)
    assert by_name["route_stage_k8_i64_bf16"] != by_name["route_stage_k1_i32_f64"]


@pytest.mark.timeout(900)
def test_the_dsl_memos_leave_every_kernels_machine_code_as_it_was(
        gate_results, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate traces with ``tests.harness.dsl_memos`` (as every test process does); the same
    gate without them (``MEGAMOE_DSL_MEMOS=0``) gives every one of its kernels the same
    machine code. (``tests/host/test_dsl_memos.py`` compares locations and MLIR too, on two
    kernels, and shows wrong memo keys caught.)"""
    assert dsl_memos.memos_in_effect(), "the gate ran without the memos: nothing to compare"
    monkeypatch.setenv(dsl_memos.MEMOS_ENV, "0")
    without = run_gate(sys.executable, ROOT, tmp_path / "cubins")
    as_dicts = [[{"name": r.name, "code": r.code} for r in rs] for rs in (gate_results, without)]
    assert len(without) == len(gate_results) and all(r.ok for r in without)
    assert code_changes(*as_dicts) == []


def test_code_changes_names_every_kernel_that_differs_or_is_missing() -> None:
    before = [{"name": "a", "code": "1"}, {"name": "b", "code": "2"}, {"name": "c", "code": "3"}]
    after = [{"name": "a", "code": "1"}, {"name": "b", "code": "9"}, {"name": "d", "code": "4"}]
    assert code_changes(before, after) == ["c: only in the first run", "d: only in the second run",
                                           "b: machine code differs"]
    assert code_changes(before, before) == []
    assert code_changes([{"name": "a", "code": ""}], [{"name": "a", "code": ""}]) == [
        "a: no machine code to compare"]

class _counting_hook:
    """A stand-in for ``stop_after_lowering`` that needs no CuTe DSL."""

    def __enter__(self) -> list[int]:
        self.lowered = [1]
        return self.lowered

    def __exit__(self, *exc: object) -> bool:
        return False
