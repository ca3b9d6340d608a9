# The NVSHMEM probe (issue 37 item 1): does NVSHMEM serve an emulated world (several PEs on
# one GPU, no MPS) for what the EP layer needs? One device call:
#   python -m devtools.pack_device_wheels --nvshmem          # here, once: .whl-nvshmem (13 MiB)
#   run(command="bash devtools/nvshmem_device.sh", carry=[".whl", ".whl-nvshmem"], timeout_s=420)
# It unpacks nvshmem4py (and cuda-core, cuda-pathfinder) beside the CuTe DSL, says what the
# image has (the NVSHMEM library comes with torch's CUDA build), then runs the multi tier's
# oracle tests in an emulated nvshmem world of 2 ranks, bounded by MEGAMOE_PROBE_TIMEOUT
# (default 300 s).
# $OUT gets probe.txt (what ran and how it ended), the run's summary and logs-nvshmem.tgz.
# On an H100 on 2026-12-05 the probe passed: 17 tests on each of the 2 ranks, 55 s.
#   run(command="bash devtools/nvshmem_device.sh all", ...): the whole multi tier instead of
#   the filter (any other word is the filter), unfiltered, so its record also comes back
#   under $OUT/records/ to commit: the evidence on which an emulated nvshmem world is served
#   (megamoe/comm/nvshmem_world.py). A hang that the timeout ends, or an error, on another
#   machine means that machine's NVSHMEM does not serve it: use torch_symm there.
set -u
what=${1:-test_ep_oracle}
filter=(--filter "$what")
if [ "$what" = all ]; then filter=(); fi
source "$(dirname "$0")/gpu_lock.sh"  # one device script at a time (exit 3 beside another)
source "$(dirname "$0")/unpack.sh"
source .whl/prelude.sh || { echo "prelude failed"; exit 1; }
NV=${MEGAMOE_NVSHMEM_SITE:-/tmp/nvsite}
Q=${MEGAMOE_NVSHMEM_TMP:-/tmp/nvq}
rm -rf "$Q"; mkdir -p "$Q"
if [ ! -d "$NV/nvshmem" ]; then
  unpack .whl-nvshmem/site.tar.xz "$NV" || { echo "cannot unpack .whl-nvshmem/site.tar.xz"; exit 1; }
fi
export PYTHONPATH=$NV:$PYTHONPATH CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_PYTHON=python3
{
  echo "## packages"
  python3 -m pip list 2>/dev/null | grep -i -E "nvshmem|cuda|^torch " || echo "(pip list failed)"
  echo "## import"
  python3 -c "import nvshmem, nvshmem.core, cuda.core; print('nvshmem4py', nvshmem.__version__, 'cuda.core', cuda.core.__version__)" 2>&1 | tail -5
  echo "## multi tier, emulated nvshmem world of 2 ranks (filter: $what)"
} > "$Q/probe.txt"
timeout -k 10 "${MEGAMOE_PROBE_TIMEOUT:-300}" \
  python3 qualify.py --suite multi --world-size 2 --mode emulated --backend nvshmem \
  "${filter[@]}" --require-arch sm_90 --timeout "$(( ${MEGAMOE_PROBE_TIMEOUT:-300} - 20 ))" \
  --output-dir "$Q/multi" > "$Q/multi.log" 2>&1
rc=$?
{ tail -n 5 "$Q/multi.log"; echo "exit status $rc"; } >> "$Q/probe.txt"
cp "$Q/probe.txt" "$OUT/"
[ -f "$Q/multi/summary.md" ] && cp "$Q/multi/summary.md" "$OUT/summary-nvshmem.md"
if [ "$what" = all ] && [ -f "$Q/multi/qualification.json" ]; then
  mkdir -p "$OUT/records"
  name=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['suggested_record_name'])" \
    "$Q/multi/qualification.json") && cp "$Q/multi/qualification.json" "$OUT/records/$name"
fi
(cd "$Q" && tar czf "$OUT/logs-nvshmem.tgz" .)
cat "$Q/probe.txt"
exit $rc
