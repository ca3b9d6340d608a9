# Session 27: where the specialized MX kernel's warps stall, per SASS instruction (issue 7:
# one expert's FC1 takes ~630 cycles per 64 x 64 k tile; uniform T = 16 is near issue-bound).
#   run(command="bash docs/wip/ncu_decode_stalls.sh", carry=[".whl"], timeout_s=600)
# Nsight Compute on the narrow default MXFP4 `m64n64s4wsrh`, DeepSeek, the layer's grid
# (`exp_decode_depth.py --layer-mcap`), one FC1 launch per case after the first (warm-up or
# bitwise run); saves the report, exports the SASS source page (stall samples per
# instruction) as CSV, and the details page. Text under $OUT (one tar); read the CSV with
# docs/wip/ncu_stalls.py.
source docs/wip/device_env.sh || exit 1
L=/tmp/logs; mkdir -p $L
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats --section SourceCounters --section MemoryWorkloadAnalysis"
for c in "skewed:1" "uniform:16"; do
  n=${c/:/-}
  timeout 200 ncu --clock-control none --graph-profiling node --kernel-name-base function \
    --kernel-name regex:specialized --launch-skip 1 --launch-count 1 $S --import-source yes \
    -o $L/rep-$n -f \
    python3 docs/wip/exp_decode_depth.py --weights mxfp4 --configs m64n64s4wsrh \
    --cases $c --layer-mcap > $L/run-$n.txt 2>&1
  echo "rc=$?" >> $L/run-$n.txt
  ncu -i $L/rep-$n.ncu-rep --page details > $L/details-$n.txt 2>&1
  ncu -i $L/rep-$n.ncu-rep --page source --print-source sass --csv > $L/sass-$n.csv 2>$L/sass-$n.err
  echo "sass rc=$? lines=$(wc -l < $L/sass-$n.csv)" >> $L/run-$n.txt
done
tar czf $OUT/logs.tgz -C /tmp logs
tail -n 3 $L/run-*.txt
grep -h -E "Duration|Issue Slots Busy|No Eligible|Registers Per|Warp Cycles Per Issued|Eligible Warps" $L/details-*.txt | head -40
# Does TMA depth still bound one expert? The same variant with 6 and 8 stages (parsed by
# exp_decode_depth.py; two CTAs per SM, which one expert does not use), GEMM alone.
timeout 150 python3 docs/wip/exp_decode_depth.py --weights mxfp4 --layer-mcap \
  --configs m64n64s4wsrh m64n64s6wsrh m64n64s8wsrh --cases skewed:1 skewed:16 uniform:1 \
  2>&1 | tee $OUT/depth.txt | tail -8
