# Session 28: which MX variant past the narrow bound (route capacity > 8192, the 128-row
# "wide" default: MXFP8 `n64s3`, MXFP4 `n64s4ws`, NVFP4 `n64s3`) is fastest at 128 and 4096
# rows per expert? The only case where the layer is not faster than PyTorch is MXFP8
# DeepSeek uniform T = 4096 (a tie), where the wide default runs. GEMM alone, the layer's
# grid (--layer-mcap), every live row compared bit for bit with the first (current) variant.
#   run(command="bash docs/wip/gpu_wide.sh", carry=[".whl"], timeout_s=600)
# $OUT gets wide.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
declare -A V=(
  [mxfp8]="n64s3 n64s3wsr n64s4wsr m64n64s4wsrh"
  [mxfp4]="n64s4ws n64s4wsr n64s4wsrb4 m64n64s4wsrhb4"
  [nvfp4]="n64s3 n64s4wsr n64s4wsrb4 m64n64s4wsrhb4"
)
args=()
for w in mxfp8 mxfp4 nvfp4; do
  set -- ${V[$w]}
  for shape in deepseek gptoss; do
    args+=("--weights $w --shape $shape --configs $1 $2" "--weights $w --shape $shape --configs $3 $4")
  done
done
precompile "${args[@]}" > $OUT/wide.txt
echo "precompile done $(( $(date +%s) - t0 )) s" >> $OUT/wide.txt
for shape in deepseek gptoss; do
  for w in mxfp8 mxfp4 nvfp4; do
    timeout 120 python3 docs/wip/exp_decode_depth.py --layer-mcap --weights $w --shape $shape \
      --configs ${V[$w]} --cases uniform:4096 skewed:4096 uniform:2048 2>&1 \
      | grep "^|\|Error" >> $OUT/wide.txt
    echo "$shape $w done $(( $(date +%s) - t0 )) s" >> $OUT/wide.txt
  done
done
cat $OUT/wide.txt
