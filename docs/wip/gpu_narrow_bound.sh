# Session 28's lead (docs/perf.md "Session 28" item 2), run in session 29 ("Session 29"
# item 1; perf/session29/narrow-bound-gemm.txt): should the narrow bound be 64 rows per
# expert (C * K <= 64 * E; DeepSeek up to T = 2048) instead of 8192 routes (DeepSeek T <=
# 1024)? Session 28 measured the uniform side (64 rows per expert: the
# 64-row variants 30-46 % faster); this measures what the rule would cost one expert with
# 1024-2048 rows, and 48 rows per expert (T = 1536). DeepSeek only (at gpt-oss's E = 128 the
# two bounds agree). GEMM alone in the layer's grid; every live row compared bit for bit
# with the first (the narrow default's) variant.
#   run(command="bash docs/wip/gpu_narrow_bound.sh", carry=[".whl"], timeout_s=400)
# $OUT gets bound.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
declare -A V=(
  [mxfp4]="m64n64s4wsrhb4 n64s4ws"
  [mxfp8]="m64n64s4wsrh n64s3"
  [nvfp4]="m64n64s4wsrhb4 n64s3 n64s4wsr"
)
precompile "--weights mxfp4 --configs ${V[mxfp4]}" "--weights mxfp8 --configs ${V[mxfp8]}" \
  "--weights nvfp4 --configs ${V[nvfp4]}" > $OUT/bound.txt
echo "precompile done $(( $(date +%s) - t0 )) s" >> $OUT/bound.txt
for w in mxfp4 mxfp8 nvfp4; do
  timeout 150 python3 docs/wip/exp_decode_depth.py --layer-mcap --weights $w --configs ${V[$w]} \
    --cases skewed:1024 skewed:1536 skewed:2048 uniform:1536 uniform:2048 2>&1 \
    | grep "^|\|Error" >> $OUT/bound.txt
  echo "$w done $(( $(date +%s) - t0 )) s" >> $OUT/bound.txt
done
cat $OUT/bound.txt
