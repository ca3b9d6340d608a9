# Session 34: MXFP8's GEMV bound after the folded E4M3 decode (branch wip/e4m3-fold). The
# GEMV (n16gemv4) against the narrow defaults at the layer's grid, FC1 / FC2 us, both shapes,
# capacities 1-32 tokens, uniform and one expert. Session 32 had the GEMV losing ~5 % at
# DeepSeek uniform T = 16 and 32, hence the bound of 1.
#   run(command="bash docs/wip/gpu_mxfp8_gemv_bound.sh", carry=[".whl"], timeout_s=300)
source docs/wip/device_env.sh || exit 1
X="python3 docs/wip/exp_decode_depth.py --layer-mcap --weights mxfp8"
C="uniform:1 uniform:4 uniform:16 uniform:32 skewed:4 skewed:16 skewed:32"
precompile "--weights mxfp8 --shape deepseek --configs n16gemv4 m64n64s4wsrh" \
  "--weights mxfp8 --shape gptoss --configs m64n64s3wsh"
{ timeout 140 $X --shape deepseek --configs n16gemv4 m64n64s4wsrh --cases $C 2>&1 | grep "^|\|Error"
  timeout 100 $X --shape gptoss --configs n16gemv4 m64n64s3wsh m64n64s4wsrh --cases $C 2>&1 \
    | grep "^|\|Error"; } | tee $OUT/bound.txt
