"""Kernels compiled once per qualification run and shared by the run's processes.

Issue 40 item 11 (a single-GPU verdict in minutes). ``cute.compile`` of CuTe DSL 4.3.5 never
reads or writes the DSL's file cache: it calls the DSL with ``compile_only=True`` and
``no_cache=True``. So each of a suite's pytest-xdist workers compiles every kernel it meets,
and compilation is most of ``single``'s test time (docs/engineering-notes.md "Qualification
time", measured by ``tests.harness.compile_clock``).

Its pytest plugin (``tests.harness.compile_share_plugin``, which ``tests/conftest.py`` loads)
does nothing unless ``$MEGAMOE_SHARE_COMPILES`` is ``1`` (``qualify.py --share-compiles`` sets
it for every process of the run, with a fresh ``$CUTE_DSL_CACHE_DIR`` of the run's own,
removed at its end). Then the DSL's
``BaseDSL.compile_and_cache``, which ``cute.compile`` reaches with ``no_cache=True``, is
called with ``no_cache=False``: the DSL's own file cache serves it. That cache is the DSL's,
not ours (we rely on its rules rather than writing a second cache):

- its key is ``BaseDSL.get_module_hash``: the DSL's version, the kernel's MLIR bytecode as
  traced for this call (every constexpr, type and layout), the DSL's environment and the
  compile options; the same key is the same compile input;
- a hit loads the compiled module (its cubin inside) after a CRC-32 check and JIT-links its
  host code, as the DSL's implicit ``@cute.jit`` calls do; a bad CRC is a miss;
- a miss compiles as before, then writes the compiled module through a temporary file and an
  atomic rename, so no reader sees half a file.

What this plugin adds: a lock file per key, so a second process that needs a kernel another is
compiling waits for it and loads it instead of compiling beside it; the DSL's in-process cache
left as it was (the entry the call adds is removed again: the kernels a test builds are held
by our own ``compile_once`` caches, as before); no sharing where the DSL must write PTX or
cubins (``CUTE_DSL_KEEP_PTX`` / ``KEEP_CUBIN``: the compile gate) or has file caching off; and
per test, how many compiles the cache served (the plugin's JUnit property ``compile_hits``,
summed into the record's ``time_profile``). It relies on DSL internals, so it refuses to
install under a DSL version it was not written for (``KNOWN_DSL_VERSIONS``), with a message,
and the run compiles as before. This module imports neither pytest nor the DSL (``qualify.py``
uses ``shared_compiles``).
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHARE_ENV = "MEGAMOE_SHARE_COMPILES"
"""``1``: the explicit compiles of this process use the DSL's file cache (module docstring)."""
DSL_CACHE_ENV = "CUTE_DSL_CACHE_DIR"
"""The DSL's file cache directory (read once, when the DSL is imported)."""
DSL_MODULE = "cutlass.base_dsl.dsl"
KNOWN_DSL_VERSIONS = ("4.3.5",)
"""The nvidia-cutlass-dsl versions whose ``compile_and_cache`` this plugin was written
against (its parameters and its file-cache branch); ``tests/host/test_compile_share.py``
checks the installed one's signature."""
LOCK_SUFFIX = ".lock"


def sharing_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``environ`` asks this process to share its compiles."""
    return environ.get(SHARE_ENV) == "1"


@dataclass
class ShareCounter:
    """Explicit compiles since the last ``reset``, and how many of them the cache served."""

    compiles: int = 0
    hits: int = 0

    def reset(self) -> None:
        self.compiles, self.hits = 0, 0


COUNTER = ShareCounter()


class _Compiling(threading.local):
    """How many real compilations (``compile_and_jit``) ran on this thread."""

    count = 0


_COMPILING = _Compiling()


@contextmanager
def key_lock(directory: str, key: str) -> Iterator[None]:
    """An exclusive lock on ``directory/.<key>.lock``, held for the ``with`` block (the kernel
    releases it when the process dies, so a crashed compiler blocks nobody)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f".{key}{LOCK_SUFFIX}"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shareable(envar: Any) -> bool:
    """Whether a compile under the DSL environment ``envar`` may use the file cache."""
    return not (envar.keep_ptx or envar.keep_cubin or envar.disable_file_caching)


def shared_compile_and_cache(original: Callable[..., object], cache_dir: Callable[[], str],
                             counter: ShareCounter = COUNTER) -> Callable[..., object]:
    """``original`` (``BaseDSL.compile_and_cache``) with an explicit compile (``no_cache``
    true) turned into a cached one under the key's lock; every other call unchanged."""

    def compile_and_cache(self: Any, module: Any, module_hash: str, function_name: str,
                          pipeline: Any, args_spec: Any, no_cache: bool, *args: Any,
                          **kwargs: Any) -> Any:
        if not no_cache or not shareable(self.envar):
            return original(self, module, module_hash, function_name, pipeline, args_spec,
                            no_cache, *args, **kwargs)
        missing = object()
        before = self.jit_cache.get(module_hash, missing)
        compiled = _COMPILING.count
        try:
            with key_lock(cache_dir(), module_hash):
                fn = original(self, module, module_hash, function_name, pipeline, args_spec,
                              False, *args, **kwargs)
        finally:
            if before is missing:
                self.jit_cache.pop(module_hash, None)
            else:
                self.jit_cache[module_hash] = before
        counter.compiles += 1
        counter.hits += _COMPILING.count == compiled
        return fn

    compile_and_cache.__wrapped__ = original  # type: ignore[attr-defined]
    return compile_and_cache


def counted_compile_and_jit(original: Callable[..., object]) -> Callable[..., object]:
    """``original`` (``BaseDSL.compile_and_jit``, the real compilation) counting its calls."""

    def compile_and_jit(self: Any, *args: Any, **kwargs: Any) -> Any:
        _COMPILING.count += 1
        return original(self, *args, **kwargs)

    compile_and_jit.__wrapped__ = original  # type: ignore[attr-defined]
    return compile_and_jit


def dsl_version() -> str | None:
    """The installed nvidia-cutlass-dsl's version, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:
        return None


_REFUSED: list[str] = []


def install(environ: Mapping[str, str] = os.environ) -> bool:
    """Share this process's explicit compiles once the DSL is imported and sharing is
    wanted; True when they are shared."""
    if not sharing_wanted(environ):
        return False
    dsl = sys.modules.get(DSL_MODULE)
    if dsl is None:
        return False
    base = dsl.BaseDSL
    if hasattr(base.compile_and_cache, "__wrapped__"):
        return True
    version = dsl_version()
    if version not in KNOWN_DSL_VERSIONS:
        if not _REFUSED:
            _REFUSED.append(str(version))
            print(f"compile_share: nvidia-cutlass-dsl {version} is not one this plugin was "
                  f"written for ({', '.join(KNOWN_DSL_VERSIONS)}): compiles are not shared",
                  file=sys.stderr)
        return False
    from cutlass.base_dsl import cache_helpers

    base.compile_and_cache = shared_compile_and_cache(
        base.compile_and_cache, lambda: str(cache_helpers.default_generated_ir_path))
    base.compile_and_jit = counted_compile_and_jit(base.compile_and_jit)
    return True


CACHE_DIR_PREFIX = "megamoe-dsl-cache-"


@contextmanager
def shared_compiles(enabled: bool) -> Iterator[Path | None]:
    """For ``qualify.py --share-compiles``: while the ``with`` block runs, every process
    started from here shares its compiles through a new empty directory
    (``$MEGAMOE_SHARE_COMPILES``, ``$CUTE_DSL_CACHE_DIR``), made outside the run's output
    directory (a compiled module holds its cubins: the run's log archive must not carry them);
    afterwards the directory is removed and the environment restored. Yields the directory,
    or None when not ``enabled`` (nothing changes)."""
    if not enabled:
        yield None
        return
    import shutil
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix=CACHE_DIR_PREFIX))
    saved = {k: os.environ.get(k) for k in (SHARE_ENV, DSL_CACHE_ENV)}
    os.environ[SHARE_ENV] = "1"
    os.environ[DSL_CACHE_ENV] = str(directory)
    try:
        yield directory
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(directory, ignore_errors=True)
