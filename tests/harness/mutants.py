"""Mutation testing: how many planted bugs do the tests of a change kill?

``qualify.py --suite mutants --mutants DIR`` (or ``./run_tests.sh mutants [DIR]``) takes a
folder of patches, each one planted bug (a *mutant*). For every patch, in its own scratch
copy of the tree (``.git``, virtual environments, build outputs and recorded results left
out):

1. the patch is applied (``git apply``); a patch that does not apply is an ``error``;
2. the tests that cover the touched files are chosen: those named in the patch's header
   (lines ``Tests: path ...`` before the first ``diff``), else every test module of the
   chosen tiers that imports a touched module directly or through other modules of the
   tree (a static import graph);
3. they run (pytest, the tiers' marker expression, under ``--timeout``, with the caller's
   ``PYTHONPATH`` after the copy's): a failure ``kills`` the mutant, a clean pass means it
   ``survived`` (the tests cannot see that bug), an expired timeout is a ``timeout``, and
   covering tests that do not collect (an import error) are an ``error``, never a kill.

The run passes only when every mutant is killed; the record lists each mutant with its
verdict, the tests that judged it and the kill rate. The scratch copy's own sources are
the ones imported (checked before each run: an editable install of the original tree must
not stand in for the mutant).

Tiers (``--mutant-tiers``, default ``host``): ``host`` and ``property`` run on any machine;
``single`` needs a GPU. A catalog patch may say ``Tiers: single`` in its header: it is run
only when that tier is asked for (a kernel bug that only the GPU tier can kill), and
recorded as ``not run`` otherwise.

Our catalog is ``tests/mutants/`` (``tests/mutants/README.md``).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.harness.junit import collection_errors
from tests.harness.runner import TIMEOUT_EXIT, run_process
from tests.suites import SUITES

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "tests" / "mutants"
TIERS = ("host", "property", "single")
"""The suites of ``tests.suites.SUITES`` whose tests may judge a mutant: each tier's paths
and marker expression are that suite's own."""
GPU_TIERS = tuple(t for t in TIERS if SUITES[t].needs_gpu)
PACKAGES = ("megamoe", "oracle", "fixtures", "sanitizers", "tests")
IGNORED = (".git", ".venv", "out", "__pycache__", ".pytest_cache", ".hypothesis",
           ".ruff_cache", ".whl", ".cute_cache", "*.egg-info")
RECORDED = ("docs/perf", "docs/qualification")
KILLED, SURVIVED, TIMEOUT, ERROR, NOT_RUN = "killed", "survived", "timeout", "error", "not run"


@dataclass(frozen=True)
class MutantResult:
    """One mutant's verdict, the tests that judged it and how long it took."""

    name: str
    verdict: str
    detail: str
    touched: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    tiers: tuple[str, ...] = ()
    duration_s: float = 0.0
    log: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class MutationRun:
    """Every mutant of a catalog; passes when each one that ran was killed."""

    results: tuple[MutantResult, ...] = field(default=())

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.results)
                for v in (KILLED, SURVIVED, TIMEOUT, ERROR, NOT_RUN)}

    @property
    def status(self) -> str:
        ran = [r for r in self.results if r.verdict != NOT_RUN]
        if not ran:
            return "fail"
        return "pass" if all(r.verdict == KILLED for r in ran) else "fail"

    @property
    def message(self) -> str:
        c = self.counts
        ran = len(self.results) - c[NOT_RUN]
        rate = f"{c[KILLED]}/{ran} killed" if ran else "no mutant ran"
        bad = [f"{r.name}: {r.verdict} ({r.detail})" for r in self.results
               if r.verdict not in (KILLED, NOT_RUN)]
        head = (f"mutants: {rate}; {c[SURVIVED]} survived, {c[TIMEOUT]} timed out, "
                f"{c[ERROR]} errors, {c[NOT_RUN]} not run")
        return head + ("; " + " | ".join(bad) if bad else "")


# ---------------------------------------------------------------- patches


def patch_header(text: str) -> dict[str, list[str]]:
    """``Tests:`` and ``Tiers:`` lines before the first ``diff`` (space-separated values)."""
    head = text.split("\ndiff ", 1)[0] if not text.startswith("diff ") else ""
    out: dict[str, list[str]] = {}
    for line in head.splitlines():
        m = re.match(r"^\s*(Tests|Tiers):\s*(.*)$", line)
        if m:
            out.setdefault(m.group(1).lower(), []).extend(m.group(2).split())
    return out


def touched_files(text: str) -> list[str]:
    """Repository paths a patch changes (``+++ b/...`` lines)."""
    files = []
    for line in text.splitlines():
        m = re.match(r"^\+\+\+ b/(\S+)", line)
        if m and m.group(1) not in files:
            files.append(m.group(1))
    return files


# ---------------------------------------------------------------- covering tests


def module_name(rel: str) -> str | None:
    """``megamoe/layer/moe_layer.py`` -> ``megamoe.layer.moe_layer`` (packages of the tree
    only)."""
    p = Path(rel)
    if p.suffix != ".py" or p.parts[0] not in PACKAGES:
        return None
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    """Modules ``path`` (module ``name``) imports, as dotted names (every prefix too)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return set()
    found: set[str] = set()
    package = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
    for node in ast.walk(tree):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)] if node.level > 1 else up
                base = ".".join([*up, base]) if base else ".".join(up)
            mods = [base, *(f"{base}.{a.name}" for a in node.names)]
        for m in mods:
            bits = m.split(".")
            found.update(".".join(bits[:i]) for i in range(1, len(bits) + 1))
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the tree's modules it imports (every ``.py`` under the packages)."""
    graph: dict[str, set[str]] = {}
    files = {}
    for pkg in PACKAGES:
        for p in (root / pkg).rglob("*.py"):
            name = module_name(p.relative_to(root).as_posix())
            if name:
                files[name] = p
    for name, p in files.items():
        graph[name] = {m for m in _imports(p, name) if m in files}
    return graph


def covering_tests(root: Path, touched: Iterable[str], tiers: Sequence[str]) -> list[str]:
    """Test modules of ``tiers`` that import a touched module, directly or transitively."""
    graph = import_graph(root)
    targets = {m for m in (module_name(t) for t in touched) if m}
    reach: dict[str, bool] = {}

    def reaches(mod: str, seen: frozenset[str] = frozenset()) -> bool:
        if mod in reach:
            return reach[mod]
        if mod in targets:
            return True
        if mod in seen:
            return False
        hit = any(reaches(dep, seen | {mod}) for dep in graph.get(mod, ()))
        reach[mod] = hit
        return hit

    out = []
    for path in dict.fromkeys(p for tier in tiers for p in SUITES[tier].paths):
        for p in sorted((root / path).rglob("test_*.py")):
            rel = p.relative_to(root).as_posix()
            name = module_name(rel)
            if name and reaches(name):
                out.append(rel)
    return out


# ---------------------------------------------------------------- one mutant


def scratch_copy(root: Path, dest: Path) -> Path:
    """The tree without what a test run never reads (module docstring)."""
    ignore = shutil.ignore_patterns(*IGNORED)
    shutil.copytree(root, dest, ignore=ignore, symlinks=True)
    for rel in RECORDED:
        shutil.rmtree(dest / rel, ignore_errors=True)
    return dest


def copy_env(copy: Path, root: Path) -> dict[str, str]:
    """The environment a mutant's tests run in: the copy first on ``PYTHONPATH``, then the
    caller's entries (the device's CuTe DSL site travels there: found on an H100, 2026-12-05,
    when a ``PYTHONPATH`` of the copy alone left every GPU-tier test module unable to import
    ``cutlass``), less any entry that is the original tree, which must not stand in for it."""
    kept = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if e and Path(e).resolve() != root.resolve()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), *kept])}


def _imports_from_copy(python: str, copy: Path, root: Path) -> str:
    """'' when the copy's own packages are the ones imported there, else what was."""
    code = "import megamoe, oracle; print(megamoe.__file__); print(oracle.__file__)"
    proc = subprocess.run([python, "-c", code], cwd=copy, capture_output=True, text=True,
                          env=copy_env(copy, root), check=False)
    files = proc.stdout.split()
    if proc.returncode != 0 or len(files) != 2:
        return f"cannot import the copy's packages: {proc.stderr[-500:]}"
    wrong = [f for f in files if not Path(f).resolve().is_relative_to(copy.resolve())]
    return f"imports resolve outside the copy: {wrong}" if wrong else ""


def run_mutant(patch: Path, *, root: Path, python: str, tiers: Sequence[str],
               timeout_s: float | None, out_dir: Path) -> MutantResult:
    """Apply, choose the tests, run them, judge (module docstring)."""
    name = patch.stem
    text = patch.read_text(encoding="utf-8")
    header = patch_header(text)
    wants = tuple(header.get("tiers", ())) or ("host",)
    unknown = [t for t in wants if t not in TIERS]
    touched = tuple(touched_files(text))
    if unknown:
        return MutantResult(name, ERROR, f"unknown tier(s) {unknown} in the header", touched)
    run_tiers = tuple(t for t in wants if t in tiers)
    if not run_tiers:
        return MutantResult(name, NOT_RUN, f"needs tier(s) {list(wants)}, asked for "
                            f"{list(tiers)}", touched, tiers=wants)
    log = out_dir / f"mutant-{name}.log"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{name}-") as tmp:
        copy = scratch_copy(root, Path(tmp) / "tree")
        applied = subprocess.run(["git", "apply", "--verbose", str(patch.resolve())], cwd=copy,
                                 capture_output=True, text=True, check=False)
        if applied.returncode != 0:
            return MutantResult(name, ERROR, f"the patch does not apply: "
                                f"{applied.stderr.strip()[-300:]}", touched, tiers=run_tiers)
        wrong = _imports_from_copy(python, copy, root)
        if wrong:
            return MutantResult(name, ERROR, wrong, touched, tiers=run_tiers)
        tests = tuple(header.get("tests", ())) or tuple(covering_tests(copy, touched, run_tiers))
        if not tests:
            return MutantResult(name, ERROR, "no test covers the touched files", touched,
                                tiers=run_tiers)
        marks = " or ".join(dict.fromkeys(f"({SUITES[t].markexpr})" for t in run_tiers))
        report = out_dir / f"mutant-{name}.xml"
        report.unlink(missing_ok=True)
        cmd = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
               f"--junitxml={report}", "-m", marks, *tests]
        res = run_process(cmd, cwd=copy, log_path=log, timeout_s=timeout_s,
                          env=copy_env(copy, root))
    took = round(time.monotonic() - t0, 3)
    broken, failed = collection_errors(report)
    if res.timed_out or res.returncode == TIMEOUT_EXIT:
        verdict, detail = TIMEOUT, f"tests ran past {timeout_s} s"
    elif broken and not failed:
        verdict, detail = ERROR, f"the covering tests did not collect: {broken[0]}"
    elif res.returncode == 0:
        verdict, detail = SURVIVED, f"{len(tests)} test module(s) passed with the bug in"
    elif res.returncode == 1:
        verdict, detail = KILLED, "a covering test failed"
    elif res.returncode == 5:
        verdict, detail = ERROR, "the covering tests selected no test in these tiers"
    else:
        verdict, detail = ERROR, f"pytest exited {res.returncode} (not a test failure)"
    return MutantResult(name, verdict, detail, touched, tests, run_tiers, took, str(log))


def run_catalog(catalog: Path, *, root: Path = ROOT, python: str = sys.executable,
                tiers: Sequence[str] = ("host",), timeout_s: float | None = 900.0,
                out_dir: Path) -> MutationRun:
    """Every ``*.patch`` of ``catalog``, in name order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    patches = sorted(catalog.glob("*.patch"))
    return MutationRun(tuple(run_mutant(p, root=root, python=python, tiers=tiers,
                                        timeout_s=timeout_s, out_dir=out_dir)
                             for p in patches))


def main(argv: list[str]) -> int:
    """``./run_tests.sh mutants [DIR] [--tiers host,property,single]``: the catalog's verdicts
    on the console (``qualify.py --suite mutants`` writes a record)."""
    import argparse

    ap = argparse.ArgumentParser(prog="run_tests.sh mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("catalog", nargs="?", type=Path, default=CATALOG)
    ap.add_argument("--tiers", default="host", help="comma-separated: host, property, single")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant")
    ap.add_argument("--output-dir", type=Path, default=ROOT / "out" / "mutants")
    args = ap.parse_args(argv)
    run = run_catalog(args.catalog, tiers=tuple(args.tiers.split(",")),
                      timeout_s=args.timeout, out_dir=args.output_dir)
    for r in run.results:
        print(f"{r.verdict:>9}  {r.name}: {r.detail} [{len(r.tests)} test module(s)]")
    print(run.message)
    return 0 if run.status == "pass" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
