"""The CI gate for kernel changes: committed GPU records must vouch for the current kernels.

Contract (issue 4): ``qualify.py --check-ledger`` fails when the current
kernel-source digest (``tests.harness.hashing``) has no passing ``single``
record under ``docs/qualification/`` (and, once ``tests/multi`` holds test
files, no passing ``multi`` record of a real or emulated world: a CPU world runs no
kernel; nor a passing ``multi-sanitize`` record, the tier's designated cases under each tool
of ``MULTI_SANITIZER_TOOLS``: memcheck, synccheck), or no passing ``sanitize`` record for each
compute-sanitizer tool (``SANITIZER_TOOLS``: memcheck, synccheck, racecheck,
initcheck), printing which kernel files changed since the last digest that
requirement saw qualified. Before any kernel module exists it passes with a
line saying so.

A record counts for a requirement when its JSON has ``kind == RECORD_KIND``, a
``suites`` entry with the requirement's name (and, for ``sanitize``, its
``tool``) and status ``pass``, no ``--filter`` (a filtered run does not cover
the suite), no ``--shard`` for ``single`` (a sharded ``gpu`` run's sanitizer tools ran whole
and count), at least one GPU in its environment, its contract tests
judging our layer (``moe_backend`` ``megamoe``: another backend's run vouches for
nothing of ours), and
``source_hashes.kernel.digest`` equal to the current digest. A suite run in shards
(``qualify.py --shard I/N``, ``tests.harness.shard``) counts when records of all ``N``
shards pass on the current kernel digest with one and the same test-source digest
(``source_hashes.tests``: the shards then partition one and the same collection); a shard
alone never counts.

It also reports, without ever failing, whether each seed suite (``tests.suites.SEED_SUITES``)
is qualified on the current digest: every part (``tests.harness.seed_suite.plan``) passing in
some record, the parts possibly run in separate records (``qualify.py --parts``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from megamoe.backends.registry import DEFAULT as OUR_BACKEND
from tests.harness.hashing import diff_files, hash_group, kernel_modules
from tests.harness.seed_suite import part_kind, plan
from tests.harness.shard import SPLIT_SUITE, Shard, parse_shard
from tests.harness.suite_run import MULTI_SANITIZE
from tests.harness.worlds import KERNEL_MODES
from tests.suites import MULTI_SANITIZER_TOOLS, SANITIZER_TOOLS, SEED_SUITES

LEDGER_DIR = "docs/qualification"
RECORD_KIND = "megamoe-qualification"


@dataclass(frozen=True)
class Requirement:
    """One record the current kernels need: a passing run of ``suite`` (for ``sanitize``,
    of that ``tool``)."""

    suite: str
    tool: str | None = None

    @property
    def label(self) -> str:
        return self.suite if self.tool is None else f"{self.suite} {self.tool}"


@dataclass(frozen=True)
class LedgerResult:
    ok: bool
    lines: tuple[str, ...]


def load_records(root: Path) -> list[tuple[Path, dict]]:
    """Every qualification record (JSON) under ``docs/qualification``, oldest first."""
    records = []
    for path in sorted((root / LEDGER_DIR).rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("kind") == RECORD_KIND:
            records.append((path, data))
    records.sort(key=lambda pr: (str(pr[1].get("finished_at", "")), str(pr[0])))
    return records


def passes_suite(record: dict, suite: str, tool: str | None = None) -> bool:
    """True when ``record`` holds a passing, unfiltered, unsharded GPU run of ``suite`` (for
    ``sanitize``: of ``tool``). A shard splits ``single`` only (``SPLIT_SUITE``): the sanitizer
    tools of a sharded ``gpu`` run ran whole and count."""
    if record.get("arguments", {}).get("shard") and suite == SPLIT_SUITE:
        return False
    return _passes(record, suite, tool)


def _passes(record: dict, suite: str, tool: str | None = None) -> bool:
    """``passes_suite`` without the shard rule. A ``multi`` run (or a seed suite's multi part)
    counts only in a world that runs kernels (``worlds.KERNEL_MODES``: real or emulated, never
    the CPU world)."""
    gpus = record.get("environment", {}).get("gpus") or []
    if record.get("arguments", {}).get("filter") or not judged_ours(record):
        return False
    return bool(gpus) and any(
        s.get("name") == suite and s.get("status") == "pass"
        and (tool is None or s.get("tool") == tool)
        and (not _in_a_world(suite) or s.get("mode") in KERNEL_MODES)
        for s in record.get("suites", [])
    )


def _in_a_world(suite: str) -> bool:
    """Does ``suite`` run in an EP world (``multi``, the tier under a tool, or a seed suite's
    multi part)?"""
    return part_kind(suite) in ("multi", MULTI_SANITIZE)


def judged_ours(record: dict) -> bool:
    """Did the record's contract tests judge our layer? (``moe_backend`` ``megamoe``; records
    written before backends existed judged nothing else.) Another backend's record never
    vouches for our kernels."""
    return (record.get("moe_backend") or {}).get("name", OUR_BACKEND) == OUR_BACKEND


def multi_evidence(record: dict) -> str:
    """What a passing ``multi`` record proves, for the ledger's line: its world."""
    for s in record.get("suites", []):
        if s.get("name") == "multi":
            mode, size = s.get("mode"), s.get("world_size")
            what = ("real GPUs" if mode == "real" else
                    "emulated on one GPU: proves no cross-GPU memory ordering")
            return f" ({mode}, P = {size}, {s.get('backend', '?')}; {what})"
    return ""


def _digest(record: dict, group: str) -> object:
    return record.get("source_hashes", {}).get(group, {}).get("digest")


def passing_shards(records: list[tuple[Path, dict]], suite: str,
                   digest: str) -> list[tuple[Shard, object, Path]]:
    """``(shard, test-source digest, path)`` of every passing shard record of ``suite`` on
    kernel ``digest``, in record order."""
    out = []
    for path, record in records:
        text = record.get("arguments", {}).get("shard")
        if not text or _digest(record, "kernel") != digest or not _passes(record, suite):
            continue
        try:
            out.append((parse_shard(str(text)), _digest(record, "tests"), path))
        except ValueError:
            continue
    return out


def shard_set(records: list[tuple[Path, dict]], suite: str, digest: str) -> list[Path] | None:
    """The records of a complete set of passing shards of ``suite`` on kernel ``digest``
    (module docstring), the latest set when there are several; None when no set is
    complete."""
    sets: dict[tuple[int, object], dict[int, Path]] = {}
    for shard, tests, path in passing_shards(records, suite, digest):
        sets.setdefault((shard.count, tests), {})[shard.index] = path
    complete = [paths for (count, _), paths in sets.items() if len(paths) == count]
    if not complete:
        return None
    latest = max(complete, key=lambda paths: max(str(p) for p in paths.values()))
    return [latest[i] for i in sorted(latest)]


def qualifying(records: list[tuple[Path, dict]], suite: str, tool: str | None
               ) -> list[tuple[Path, dict]]:
    """Every record that qualified its own kernel digest for ``suite`` (``tool``), in record
    order: a whole passing run, or for the split suite the latest record of a complete set
    of shards (``shard_set``). The ledger names the newest as the last qualified digest and
    lists the kernel files changed since."""
    whole = [(p, r) for p, r in records if passes_suite(r, suite, tool)]
    if tool is not None or suite != SPLIT_SUITE:
        return whole
    order = {p: i for i, (p, _) in enumerate(records)}
    lasts = set()
    for digest in {_digest(r, "kernel") for _, r in records if r.get("arguments", {}).get("shard")}:
        paths = shard_set(records, suite, str(digest))
        if paths:
            lasts.add(max(paths, key=order.__getitem__))
    whole_paths = {p for p, _ in whole}
    return [(p, r) for p, r in records if p in whole_paths or p in lasts]


def seed_parts(records: list[tuple[Path, dict]], suite: str, digest: str
               ) -> dict[tuple[str, str | None], Path | None]:
    """Every part of the seed suite ``suite`` (``tests.harness.seed_suite.plan``: ``single``,
    ``multi``, ``sanitize`` once per tool) -> the latest record holding it passing on kernel
    ``digest`` (by ``_passes``: a GPU run judging our layer, unfiltered; the multi part in a
    world that runs kernels), or None. A seed suite may run in several sittings
    (``qualify.py --parts``): it is qualified when every part has a record, all of one and the
    same test-source digest (as shards: one version of the tests judged every part). Of
    several such sets, the one whose latest record is newest (record names begin with their
    time, as for shards); with none complete, the newest set, so that the missing parts named
    are those still to run on the newest tests."""
    steps = plan(suite)
    by_tests: dict[object, dict[tuple[str, str | None], Path]] = {}
    for path, record in records:
        if _digest(record, "kernel") != digest or record.get("arguments", {}).get("shard"):
            continue
        group = by_tests.setdefault(_digest(record, "tests"), {})
        for name, tool in steps:
            if _passes(record, name, tool):
                group[(name, tool)] = path
    groups = [g for g in by_tests.values() if g]
    complete = [g for g in groups if len(g) == len(steps)]
    chosen = max(complete or groups, key=lambda g: max(str(p) for p in g.values()),
                 default={})
    return {step: chosen.get(step) for step in steps}


def seed_lines(root: Path, records: list[tuple[Path, dict]], digest: str) -> list[str]:
    """The ledger's lines on the seeds' named suites: information, never a failure (no kernel
    change needs them; docs/qualification.md)."""
    lines = []
    for suite in SEED_SUITES:
        parts = seed_parts(records, suite, digest)
        missing = [Requirement(*step).label for step, path in parts.items() if path is None]
        if not missing:
            paths = sorted({str(p.relative_to(root)) for p in parts.values() if p is not None})
            lines.append(f"ledger: seed suite {suite}: qualified by " + ", ".join(paths))
        else:
            lines.append(f"ledger: seed suite {suite}: not qualified on this digest (no passing "
                         f"record of: {', '.join(missing)}; information only)")
    return lines


def multi_tests_exist(root: Path) -> bool:
    return any((root / "tests" / "multi").rglob("test_*.py"))


def requirements(root: Path) -> tuple[Requirement, ...]:
    """``single`` (and ``multi`` once the multi tier has tests), then one sanitizer run per
    tool, then (with the multi tier) the tier under each of its tools."""
    multi = multi_tests_exist(root)
    return (Requirement("single"), *((Requirement("multi"),) if multi else ()),
            *(Requirement("sanitize", t) for t in SANITIZER_TOOLS),
            *(Requirement(MULTI_SANITIZE, t) for t in (MULTI_SANITIZER_TOOLS if multi else ())))


def check_ledger(root: Path) -> LedgerResult:
    """See the module contract."""
    kernels = kernel_modules(root)
    if not kernels:
        return LedgerResult(True, (
            "ledger: no kernel modules yet (no megamoe/**/*_kernel.py): nothing to gate; pass",
        ))
    current = hash_group(root, "kernel")
    records = load_records(root)
    lines = [f"ledger: kernel-source digest {current.digest[:16]} "
             f"({len(current.files)} files, {len(kernels)} kernel modules)"]
    ok = True
    for req in requirements(root):
        label = req.label
        passing = [(p, r) for p, r in records if passes_suite(r, req.suite, req.tool)]
        match = [p for p, r in passing if _digest(r, "kernel") == current.digest]
        if match:
            if req.suite == "multi":
                by_mode = {}
                for p, r in passing:
                    if _digest(r, "kernel") == current.digest:
                        by_mode[multi_evidence(r)] = p
                lines += [f"ledger: multi: qualified by {p.relative_to(root)}{ev}"
                          for ev, p in sorted(by_mode.items())]
                if not any("(real," in ev for ev in by_mode):
                    lines.append("ledger: multi: no real-world record for this digest yet "
                                 "(cross-GPU memory ordering unproven)")
                continue
            lines.append(f"ledger: {label}: qualified by {match[-1].relative_to(root)}")
            continue
        shards = shard_set(records, req.suite, current.digest) if req.tool is None else None
        if shards:
            lines.append(f"ledger: {label}: qualified by {len(shards)} shards: "
                         + ", ".join(str(p.relative_to(root)) for p in shards))
            continue
        ok = False
        lines.append(f"ledger: {label}: FAIL: no passing '{label}' record in {LEDGER_DIR}/ for "
                     f"kernel-source digest {current.digest[:16]}")
        partial = sorted({shard.text for shard, _, _ in passing_shards(
            records, req.suite, current.digest)}) if req.tool is None else []
        if partial:
            lines.append(f"ledger: {label}: passing shards of this digest: {', '.join(partial)} "
                         "(every shard of one count is needed)")
        qualified = qualifying(records, req.suite, req.tool)
        if not qualified:
            lines.append(f"ledger: {label}: no passing '{label}' record exists at all")
            continue
        last_path, last = qualified[-1]
        old = last.get("source_hashes", {}).get("kernel", {})
        lines.append(f"ledger: {label}: last qualified digest {str(old.get('digest'))[:16]} "
                     f"({last_path.relative_to(root)}); kernel files changed since:")
        changes = diff_files(old.get("files", {}), current.files)
        lines += [f"  {c}" for c in changes] or ["  (no per-file hashes in that record)"]
    lines += seed_lines(root, records, current.digest)
    if not ok:
        lines.append("ledger: run python qualify.py --suite gpu --require-arch sm_90 ... (single, "
                     "then each sanitizer tool), and --suite multi --world-size 2 (alone, then "
                     "with --sanitizer-tool memcheck and synccheck), on a GPU machine and "
                     "commit the records; see docs/qualification.md")
    return LedgerResult(ok, tuple(lines))
