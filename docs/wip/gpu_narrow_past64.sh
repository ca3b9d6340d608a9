# Session 29's lead: does the 64-row tile still win past 64 rows per expert (the bound,
# MX_NARROW_ROWS_PER_EXPERT)? At 128 the 128-row tile won (docs/perf.md "One A load per
# stage"); this measures 80, 96 and 112 rows per expert at DeepSeek (uniform T = 2560, 3072,
# 3584) and 96 at gpt-oss (uniform T = 3072), with one expert at T = 3072 for the cost. GEMM
# alone in the layer's grid; every live row compared bit for bit with the first (the narrow
# default's) variant; the second is the format's 128-row default.
#   run(command="bash docs/wip/gpu_narrow_past64.sh", carry=[".whl"], timeout_s=400)
# $OUT gets past64.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
declare -A D=(
  [mxfp4]="m64n64s4wsrhb4 n64s4ws"
  [mxfp8]="m64n64s4wsrh n64s3"
  [nvfp4]="m64n64s4wsrhb4 n64s4wsr"
)
declare -A G=(
  [mxfp4]="m64n64s4wsrh n64s4ws"
  [mxfp8]="m64n64s3wsh n64s3"
  [nvfp4]="m64n64s6wsh n64s4wsr"
)
precompile "--weights mxfp4 --configs ${D[mxfp4]}" "--weights mxfp8 --configs ${D[mxfp8]}" \
  "--weights nvfp4 --configs ${D[nvfp4]}" "--shape gptoss --weights mxfp4 --configs ${G[mxfp4]}" \
  "--shape gptoss --weights mxfp8 --configs ${G[mxfp8]}" \
  "--shape gptoss --weights nvfp4 --configs ${G[nvfp4]}" > $OUT/past64.txt
echo "precompile done $(( $(date +%s) - t0 )) s" >> $OUT/past64.txt
for w in mxfp4 mxfp8 nvfp4; do
  timeout 100 python3 docs/wip/exp_decode_depth.py --layer-mcap --weights $w --configs ${D[$w]} \
    --cases uniform:2560 uniform:3072 uniform:3584 skewed:3072 2>&1 \
    | grep "^|\|Error" >> $OUT/past64.txt
  timeout 60 python3 docs/wip/exp_decode_depth.py --layer-mcap --shape gptoss --weights $w \
    --configs ${G[$w]} --cases uniform:3072 skewed:3072 2>&1 | grep "^|\|Error" >> $OUT/past64.txt
  echo "$w done $(( $(date +%s) - t0 )) s" >> $OUT/past64.txt
done
cat $OUT/past64.txt
