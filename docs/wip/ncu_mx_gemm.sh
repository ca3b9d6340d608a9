# Nsight Compute on the default MXFP4 GEMM (`m64n64s3ws`), DeepSeek shape, to see what bounds it
# (issue 7: the quantized recipes' GEMMs run at ~25 % of weight streaming at uniform T = 16).
#   run(command="bash docs/wip/ncu_mx_gemm.sh", carry=[".whl"], timeout_s=600)
# Profiles the first two launches of the specialized kernel per case (both FC1: the warmup and
# the first timed call); text
# reports only (one tar under $OUT). `--clock-control none`: the device's METHOD.md.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_PYTHON=python3
L=/tmp/logs; mkdir -p $L /tmp/cc
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section InstructionStats --section SourceCounters"
for c in "uniform 16" "skewed 1"; do
  set -- $c
  timeout 190 ncu --clock-control none --graph-profiling node --kernel-name-base function \
    --kernel-name regex:specialized --launch-count 2 $S --print-summary none \
    python3 -m megamoe.bench.mx_gemm --weights mxfp4 --routes $1 --tokens $2 \
    --configs m64n64s3ws --samples 1 --calls 1 --output-dir /tmp/b-$1 > $L/ncu-$1-T$2.txt 2>&1
  echo "rc=$?" >> $L/ncu-$1-T$2.txt
  if grep -q "No kernels were profiled" $L/ncu-$1-T$2.txt; then  # kernel named otherwise: list them
    timeout 100 ncu --clock-control none --launch-count 40 --section LaunchStats --print-summary per-kernel \
      python3 -m megamoe.bench.mx_gemm --weights mxfp4 --routes $1 --tokens $2 \
      --configs m64n64s3ws --samples 1 --calls 1 --output-dir /tmp/b-$1 > $L/ncu-names-$1.txt 2>&1
    break
  fi
done
tar czf $OUT/logs.tgz -C /tmp logs
grep -h -E "rc=|Duration|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $L/ncu-*.txt | head -60
