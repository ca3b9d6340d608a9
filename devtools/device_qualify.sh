# Qualify the kernels on the device machine and bring back only what gets committed:
#   run(command="bash devtools/device_qualify.sh single", carry=[".whl"], timeout_s=600)
#   run(command="bash devtools/device_qualify.sh sanitize", carry=[".whl"], timeout_s=400)
#   run(command="bash devtools/device_qualify.sh sanitize racecheck", ...)  (one tool again)
#   run(command="bash devtools/device_qualify.sh single 1/2", ...), then "single 2/2": the
#   suite in shards, one device call each (tests.harness.shard; the ledger needs every shard)
#   run(command="bash devtools/device_qualify.sh multi 2", ...): the multi tier in an
#   emulated world of 2 ranks on the one GPU (real when the machine has 2 GPUs); "multi 4"
#   likewise; "multi 2 memcheck" (or synccheck, ...): the tier's designated cases with
#   every rank's process under that tool
#   run(command="bash devtools/device_qualify.sh seed mega_sm107", ...): a seeds' named suite
#   (its single, multi and sanitize parts in one record; MEGAMOE_SEED_TIMEOUT s per part);
#   "seed mega_sm107 2 single,multi" then "seed mega_sm107 2 sanitize": the parts in two calls
#   (qualify.py --parts; --check-ledger joins them); its single part runs in 12 xdist workers
#   at their share of the cores with --share-compiles (below): on an H100 (2026-12-06)
#   mega_sm107's took 52 s so and the whole seed call 202 s, against 248 s for the part in one
#   process (2026-12-05); mega_sm90_mxfp4's part 32 s
#   run(command="bash devtools/device_qualify.sh mutants", ...): the GPU-tier planted bugs of
#   tests/mutants/ (qualify.py --suite mutants --mutant-tiers single; "mutants host,single"
#   for the whole catalog), each under MEGAMOE_MUTANT_TIMEOUT s
#   run(command="bash devtools/device_qualify.sh gpu", ...): `single` and the four sanitizer
#   tools in one record, the tools beside single's xdist phase (--sanitizers-beside): the
#   whole single-GPU verdict in one call (H100s, 2026-12-06: 201 s and 183 s, 216 s of call;
#   MEGAMOE_GPU_TIMEOUT s per suite, default 560); "gpu 1/3": shard 1 of 3 of `single` with
#   the four tools whole beside it, then "single 2/3" and "single 3/3"
# A call returns at most 8 files from $OUT; qualify.py writes one log and one JUnit report
# per suite or sanitized case (the sanitize suite about 25 per tool), so everything is
# written under /tmp and $OUT gets: records/<suggested_record_name> (the records to commit
# under docs/qualification/), summaries.md (every suite's summary, one after the other) and
# logs-<what>.tgz with the rest: at most 6 files. Several runs can share one call, one after
# the other (`bash devtools/device_qualify.sh multi 2; bash devtools/device_qualify.sh multi 4`):
# each keeps its records, its summary and its own logs-<what>.tgz. Never two runs beside each
# other: single, multi and multi's sanitizer runs hold the GPU alone, and the neighbour watch
# fails them beside any other process (2026-12-05: multi 2 beside multi 2 memcheck, both failed).
# single: `single` alone on the GPU (it holds timing tests; docs/gpu.md), 12 xdist workers
# (MEGAMOE_SINGLE_WORKERS), at most 560 s (MEGAMOE_SINGLE_TIMEOUT): the suite took 380-468 s
# in the six qualifications before session 28 under a 480 s limit, and in session 28 its
# xdist phase alone 427 s on 8 workers, past it (docs/perf.md "Session 28"); session 29 on
# 12 workers: xdist phase 403 s, alone phase 60 s, 469 s in all.
# Session 32: 657 tests, 5 600 s of test time; on 12 workers the xdist phase took 490 s and
# the suite's 560 s cut the alone phase off: run it in shards (single 1/2, single 2/2).
# sanitize: the compute-sanitizer tools (tests.suites.SANITIZER_TOOLS) in parallel, each
# under MEGAMOE_SANITIZE_TIMEOUT s (default 420; session 32: racecheck passed 280 s with 15
# cases, the other three finished inside it).
# single and gpu pass --share-compiles (each kernel lowered once in the run; the record says
# so; docs/qualification.md): the whole single in three shards passed with it on an H100 in
# 662 s against 717 s (2026-12-05); with each xdist worker at its share of the cores
# (qualify.py --workers, 2026-12-06) in 334 s. MEGAMOE_SHARE_COMPILES=0 leaves it off.
# sanitize, gpu and seed pass --sanitize-workers 3 (MEGAMOE_SANITIZE_WORKERS): each tool runs
# three of its cases at once, each its own process under the tool at its share of the cores
# (before 2026-12-06 one after the other: a tool's 18 cases took 214-251 s on the H100);
# sanitize's four qualify processes get OMP_NUM_THREADS and MKL_NUM_THREADS at cores //
# (tools x 3) unless the caller sets them.
# seed passes --workers 12 (MEGAMOE_SEED_WORKERS) and --share-compiles to its single part,
# as single gets them (before 2026-12-06 the part ran in one process: 248 s for mega_sm107,
# 52 s now on the same kind of machine).
# MEGAMOE_QUALIFY_EXTRA: options added to every qualify.py run of the call, e.g.
# `MEGAMOE_QUALIFY_EXTRA=--group-compiles bash devtools/device_qualify.sh single 1/3`.
# Every qualify.py run gets --wall-budget: what is left until MEGAMOE_CALL_END (epoch seconds;
# default: this script's start + 570 s, the device call's 600 s less the archive and the copy
# back), so that a run past it still ends, writes its record and brings its logs back (gpu 1/3
# with the four tools beside it ran past 600 s on 2026-12-05 and nothing came back). Several
# runs in one call share one end: `export MEGAMOE_CALL_END=$(( $(date +%s) + 570 ))` first.
set -u
: "${MEGAMOE_CALL_END:=$(( $(date +%s) + 570 ))}"
# seconds left until MEGAMOE_CALL_END, at least 1 (a run past it starts, and times out at once)
budget() { local left=$(( MEGAMOE_CALL_END - $(date +%s) )); echo $(( left > 1 ? left : 1 )); }
# qualify.py under what is left of the call, with MEGAMOE_QUALIFY_EXTRA's options (words, e.g.
# "--share-compiles") added to every run
qualify() {
  local extra=()
  read -r -a extra <<< "${MEGAMOE_QUALIFY_EXTRA:-}"
  python3 qualify.py --wall-budget "$(budget)" "${extra[@]}" "$@"
}
what=${1:?usage: bash devtools/device_qualify.sh single [I/N] | sanitize [tool] | multi P [tool] | seed NAME [P [PARTS]] | gpu [I/N] | mutants [TIERS]}
source "$(dirname "$0")/gpu_lock.sh"  # one device script at a time (exit 3 beside another)
source .whl/prelude.sh || { echo "prelude failed"; exit 1; }
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
Q=${MEGAMOE_QUALIFY_TMP:-/tmp/q}
share=(--share-compiles)
if [ "${MEGAMOE_SHARE_COMPILES:-1}" = 0 ]; then share=(); fi
sanitize_workers=${MEGAMOE_SANITIZE_WORKERS:-3}
case_workers=(--sanitize-workers "$sanitize_workers")
# a fresh $Q each call: on a warm machine an earlier call's statuses and records are still
# there, and its failed suite would fail this call (or its records come back again)
rm -rf "$Q"
mkdir -p /tmp/cc "$Q" "$OUT/records"
case "$what" in
  single)
    shard=()
    if [ -n "${2:-}" ]; then shard=(--shard "$2"); fi
    qualify --suite single "${share[@]}" --require-arch sm_90 --workers "${MEGAMOE_SINGLE_WORKERS:-12}" \
      --timeout "${MEGAMOE_SINGLE_TIMEOUT:-560}" "${shard[@]}" \
      --output-dir "$Q/single" > "$Q/single.log" 2>&1
    echo "single ${2:-} rc=$?" >> "$Q/rc.txt"
    tag=single${2:+-${2/\//of}} ;;
  sanitize)
    tools=$(python3 -c "from tests.suites import SANITIZER_TOOLS; print(*SANITIZER_TOOLS)") \
      || { echo "cannot read the sanitizer tools (tests.suites)"; exit 1; }
    if [ -n "${2:-}" ]; then
      case " $tools " in *" $2 "*) tools=$2 ;; *) echo "unknown tool: $2 (one of: $tools)"; exit 2 ;; esac
    fi
    # each tool is a qualify.py of its own that knows only its own cases: give every case its
    # share of the cores among all the tools' (the caller's setting stands)
    ntools=$(wc -w <<< "$tools")
    threads=$(python3 -c "from tests.harness.suite_run import worker_threads as w
print(w($ntools * $sanitize_workers))") || { echo "cannot read the thread share"; exit 1; }
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads} MKL_NUM_THREADS=${MKL_NUM_THREADS:-$threads}
    for t in $tools; do
      (qualify --suite sanitize --sanitizer-tool "$t" "${case_workers[@]}" --require-arch sm_90 \
         --timeout "${MEGAMOE_SANITIZE_TIMEOUT:-420}" --output-dir "$Q/san-$t" > "$Q/san-$t.log" 2>&1
       echo "$t rc=$?" >> "$Q/rc.txt") &
    done
    wait
    tag=sanitize${2:+-$2} ;;
  multi)
    p=${2:?usage: multi P [tool]}
    tool=()
    label="multi$p"
    if [ -n "${3:-}" ]; then tool=(--sanitizer-tool "$3"); label="multi$p-$3"; fi
    qualify --suite multi --world-size "$p" "${tool[@]}" --require-arch sm_90 \
      --timeout "${MEGAMOE_MULTI_TIMEOUT:-560}" --output-dir "$Q/$label" > "$Q/$label.log" 2>&1
    echo "$label rc=$?" >> "$Q/rc.txt"
    tag=$label ;;
  seed)
    name=${2:?usage: seed mega_sm107|mega_sm90_mxfp4 [P [PARTS]]}
    parts=()
    if [ -n "${4:-}" ]; then parts=(--parts "$4"); fi
    qualify --suite "$name" --world-size "${3:-2}" "${parts[@]}" "${share[@]}" \
      --workers "${MEGAMOE_SEED_WORKERS:-12}" "${case_workers[@]}" --require-arch sm_90 \
      --timeout "${MEGAMOE_SEED_TIMEOUT:-500}" --output-dir "$Q/$name" > "$Q/$name.log" 2>&1
    echo "$name rc=$?" >> "$Q/rc.txt"
    tag=$name${4:+-${4//,/-}} ;;
  gpu)
    shard=()
    if [ -n "${2:-}" ]; then shard=(--shard "$2"); fi
    qualify --suite gpu "${share[@]}" "${case_workers[@]}" --sanitizers-beside --require-arch sm_90 \
      --workers "${MEGAMOE_SINGLE_WORKERS:-12}" --timeout "${MEGAMOE_GPU_TIMEOUT:-560}" \
      "${shard[@]}" --output-dir "$Q/gpu" > "$Q/gpu.log" 2>&1
    echo "gpu ${2:-} rc=$?" >> "$Q/rc.txt"
    tag=gpu${2:+-${2/\//of}} ;;
  mutants)
    # the planted bugs of tests/mutants/ that need a GPU (their headers say Tiers: single),
    # each under MEGAMOE_MUTANT_TIMEOUT s (default 300); "mutants host,single" adds the rest
    qualify --suite mutants --mutant-tiers "${2:-single}" --require-arch sm_90 \
      --timeout "${MEGAMOE_MUTANT_TIMEOUT:-300}" --output-dir "$Q/mutants" > "$Q/mutants.log" 2>&1
    echo "mutants rc=$?" >> "$Q/rc.txt"
    tag=mutants ;;
  *) echo "unknown: $what (single, sanitize, multi, seed, gpu or mutants)"; exit 2 ;;
esac
for rec in "$Q"/*/qualification.json; do
  [ -f "$rec" ] || continue
  dir=$(dirname "$rec")
  name=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['suggested_record_name'])" "$rec")
  cp "$rec" "$OUT/records/$name"
  if [ -f "$dir/summary.md" ]; then
    { echo "<!-- $(basename "$dir") -->"; cat "$dir/summary.md"; echo; } >> "$OUT/summaries.md"
  fi
done
(cd "$Q" && tar czf "$OUT/logs-$tag.tgz" --exclude='*.cubin' .)
cat "$Q/rc.txt"
tail -n 2 "$Q"/*.log
ls "$OUT/records"
! grep -v "rc=0$" "$Q/rc.txt" > /dev/null  # the exit status: 0 only if every suite passed
