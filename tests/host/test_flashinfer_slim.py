"""``devtools/flashinfer_slim.py``: the part of the FlashInfer wheel the sm90 MegaMoE backends
need, packed into one small archive (a device call takes 64 MiB in all). Checked on a stand-in
wheel: exactly ``moe_ep`` and the listed helpers go in, under their wheel paths; a listed helper
the wheel lacks is named and fails the tool."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

from devtools.flashinfer_slim import ARCHIVE, KEEP_FILES, main, slim


def _wheel(path: Path, leave_out: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("flashinfer/moe_ep/__init__.py", "# moe_ep")
        z.writestr("flashinfer/moe_ep/csrc/push.cu", "// a kernel")
        z.writestr("flashinfer/gemm/gemm_base.py", "# not needed")
        z.writestr("flashinfer_python-0.7.2.post1.dist-info/METADATA", "Name: flashinfer-python")
        for name in KEEP_FILES:
            if name != leave_out:
                z.writestr(name, f"# {name}")
    return path


def test_the_archive_holds_moe_ep_and_the_helpers_only(tmp_path: Path) -> None:
    files, nbytes, missing = slim(_wheel(tmp_path / "fi.whl"), tmp_path / "out")
    with tarfile.open(tmp_path / "out" / ARCHIVE) as tar:
        names = set(tar.getnames())
        unpacked = sum(m.size for m in tar.getmembers())
        first = tar.extractfile("flashinfer/moe_ep/csrc/push.cu")
        assert first is not None and first.read() == b"// a kernel"
    assert names == {"flashinfer/moe_ep/__init__.py", "flashinfer/moe_ep/csrc/push.cu",
                     *KEEP_FILES}
    assert missing == [] and files == len(names) and nbytes == unpacked > 0


def test_a_helper_the_wheel_lacks_is_named_and_fails(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    gone = KEEP_FILES[0]
    wheel = _wheel(tmp_path / "fi.whl", leave_out=gone)
    assert main([str(wheel), str(tmp_path / "out")]) == 1
    assert gone in capsys.readouterr().err
