"""Keep a carried ninja build up to date across device calls: FlashInfer's JIT cache.

FlashInfer builds its kernels with ninja under ``$FLASHINFER_WORKSPACE_BASE``;
``devtools/flashinfer_device.sh`` brings that tree back as a tarball and unpacks it in the next
call (tar keeps each file's time). ninja rebuilds an output when any input, headers included
(its ``.ninja_deps``), is newer than the output's time as its ``.ninja_log`` recorded it. The
inputs that are not in the tarball are installed again in every call: the ``apache-tvm-ffi``
wheel's headers (pip writes them with the time of the install) and FlashInfer's own sources.
On an H100 (2026-12-06) that rebuilt ``sm90_push_a2a`` and two more modules from the carried
cache, over 150 s. FlashInfer writes its generated sources only when their text changed
(``_write_snapshot_atomic``), so those keep their carried times.

``date_back`` dates the freshly installed inputs to one fixed old time (``OLD``), before any
build, so the carried outputs stay newer than every input they were built from. It changes no
file's contents; an input whose contents did change still changes the command or the
generated source, which ninja and FlashInfer see for themselves.

    python3 -m devtools.jit_cache date-back /tmp/fisite /tmp/fi-root
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

OLD = 1_577_836_800.0
"""2020-01-01T00:00:00Z: older than any build the cache holds."""
OLD_DAY = time.strftime("%Y-%m-%d", time.gmtime(OLD))


def date_back(roots: Sequence[Path], when: float = OLD) -> int:
    """Every file, directory and link under each of ``roots`` (the roots too) dated ``when``
    (access and modification time; a link itself, never its target); returns how many."""
    missing = [str(r) for r in roots if not r.exists()]
    if missing:
        raise FileNotFoundError(f"date_back: no such path: {', '.join(missing)}")
    n = 0
    for root in roots:
        for here, dirs, files in os.walk(root, topdown=False):  # a directory after its listing
            for name in (*dirs, *files):
                os.utime(Path(here, name), (when, when), follow_symlinks=False)
                n += 1
        os.utime(root, (when, when), follow_symlinks=False)
        n += 1
    return n


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.jit_cache", description=__doc__)
    sub = ap.add_subparsers(dest="verb", required=True)
    back = sub.add_parser("date-back", help=f"date every file under PATH... to {OLD_DAY}")
    back.add_argument("paths", nargs="+", type=Path)
    args = ap.parse_args(list(argv))
    try:
        n = date_back(args.paths)
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    print(f"jit_cache: {n} entries under {len(args.paths)} path(s) dated {OLD_DAY}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
