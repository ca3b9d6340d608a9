# The EP benchmarks on the device machine, one call (issues 37 item 7 and 38 item 3):
#   run(command="bash devtools/ep_bench_device.sh 2 quick", carry=[".whl"], timeout_s=600)
#   run(command="bash devtools/ep_bench_device.sh 8", carry=[".whl"], kind="nvidia-h200-x8", ...)
# P ranks under torchrun: a real world when the machine has P GPUs, else an emulated one on
# GPU 0 (numbers there are overheads and checks that the benchmarks run, never bandwidths).
# Runs ep_layer, ep_dispatch and ep_combine (ep_layer_torch too in a real world), each
# bounded by MEGAMOE_EP_BENCH_TIMEOUT s (default 125: four fit one 600 s device call),
# "quick" for their --quick cases. In
# an emulated world the exchange benchmarks' all-to-all baseline goes over gloo, which a CUDA
# graph cannot capture, so they run with --no-graph there.
# $OUT gets <bench>.json per benchmark (the record; its report comes back with
# `python -m megamoe.bench --plot <bench>.json --output-dir DIR` anywhere), rc.txt, and
# logs-ep-bench.tgz with every rank's output and the reports: at most 6 files.
set -u
p=${1:?usage: bash devtools/ep_bench_device.sh P [quick]}
case "$p" in 2|4|8) ;; *) echo "P: expected 2, 4 or 8, got $p"; exit 2 ;; esac
source "$(dirname "$0")/gpu_lock.sh"  # one device script at a time (exit 3 beside another)
quick=()
if [ "${2:-}" = quick ]; then quick=(--quick); fi
source .whl/prelude.sh || { echo "prelude failed"; exit 1; }
export CUTE_DSL_CACHE_DIR=/tmp/cc
L=/tmp/ep-bench
rm -rf "$L"; mkdir -p "$L" /tmp/cc
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -ge "$p" ]; then mode=real; else mode=emulated; fi
benches="ep_layer ep_dispatch ep_combine"
if [ "$mode" = real ]; then benches="$benches ep_layer_torch"; fi
echo "world: $mode, $p ranks, $gpus GPU(s)" > "$OUT/rc.txt"
for b in $benches; do
  graph=()
  case "$mode:$b" in emulated:ep_dispatch|emulated:ep_combine) graph=(--no-graph) ;; esac
  MEGAMOE_EP_MODE=$mode timeout -k 10 "${MEGAMOE_EP_BENCH_TIMEOUT:-125}" \
    python3 -m torch.distributed.run --nproc-per-node="$p" -m megamoe.bench "$b" \
    "${quick[@]}" "${graph[@]}" --no-plots --output-dir "$L/$b" > "$L/$b.log" 2>&1
  echo "$b rc=$?" >> "$OUT/rc.txt"
  if [ -f "$L/$b/$b.json" ]; then cp "$L/$b/$b.json" "$OUT/"; fi
done
(cd "$L" && tar czf "$OUT/logs-ep-bench.tgz" .)
cat "$OUT/rc.txt"
tail -n 3 "$L"/*.log
