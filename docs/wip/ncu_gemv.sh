# For a later session (prepared in session 33): why the decode-batch GEMV streams its weights
# at about half the copy bandwidth. DeepSeek uniform FC1 moves 1.5-2.2 TB/s (MXFP8 T = 1:
# 235 MB in 154 us; MXFP4 T = 16: 2.2 TB/s, docs/perf.md "Session 32" item 1), while the
# issue rate allows more (about 230 warp instructions a 1 KiB step) and a register ring over
# the weights did not help. At MXFP8 T = 1 a CTA's tile takes about 40 us for 14 steps a
# warp, about 2.8 us a step: far past one DRAM round trip, so either DRAM itself is the limit
# for this access pattern (16 rows x 128 bytes a warp step) or the warps wait on something
# else. Nsight Compute answers it: DRAM throughput and sectors per request
# (MemoryWorkloadAnalysis), achieved occupancy (MXFP8: 112 registers, four CTAs an SM),
# and the stall reason per SASS instruction (SourceCounters; read the CSV with
# docs/wip/ncu_stalls.py, whose roles do not apply here: sort by samples).
#   run(command="bash docs/wip/ncu_gemv.sh", carry=[".whl"], timeout_s=600)
# The GEMV's kernel function is `kernel` (mx_gemv_kernel.make_gemv), so its name starts
# `kernel_cutlass_kernel_`; the first launch (the warm-up) is skipped.
source docs/wip/device_env.sh || exit 1
L=/tmp/logs; mkdir -p $L
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats"
S="$S --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters"
for job in mxfp8:uniform:1 mxfp4:uniform:1 mxfp4:uniform:16 mxfp4:skewed:1; do
  IFS=: read -r w r t <<< "$job"
  n=$w-$r-$t
  timeout 130 ncu --clock-control none --graph-profiling node --kernel-name-base function \
    --kernel-name regex:^kernel_cutlass_kernel_ --launch-skip 1 --launch-count 1 $S \
    --import-source yes -o $L/rep-$n -f \
    python3 docs/wip/exp_decode_depth.py --weights $w --configs n16gemv4 --cases $r:$t \
    --layer-mcap > $L/run-$n.txt 2>&1
  echo "rc=$?" >> $L/run-$n.txt
  ncu -i $L/rep-$n.ncu-rep --page details > $L/details-$n.txt 2>&1
  ncu -i $L/rep-$n.ncu-rep --page source --print-source sass --csv > $L/sass-$n.csv 2>$L/sass-$n.err
done
tar czf $OUT/logs.tgz -C /tmp logs
tail -n 2 $L/run-*.txt
grep -H -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible|Issue Slots Busy" \
  $L/details-*.txt | head -60
