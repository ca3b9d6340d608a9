# Ran in session 33 before the patch landed (docs/perf.md "Session 33" item 1: NVFP4's GEMV
# wins every case, MXFP8's loses 10 % at DeepSeek uniform T = 1 and wins 36-39 % at one
# expert). For the session after 32, before qualifying s32-gemv-formats.patch: is
# MXFP8's GEMV bound (one token) a loss in the layer at DeepSeek uniform T = 1? The paired
# benchmark had the layer at 285.7 us against session 25's 263.4 (wgmma kernels, pre-PDL),
# while the GEMM alone had the GEMV 3 % faster (docs/perf.md "Session 32" items 2-3). The
# layer by stage with the patch's rule against the same code with MXFP8 left out of it
# (GEMV_MAX_ROWS patched in-process), both shapes, T = 1, uniform and one expert; the NVFP4
# rule the same way at T = 1 and 16 as a check of item 2 in the layer. About 3 minutes.
#   run(command="bash docs/wip/gpu_mxfp8_gemv_ab.sh", carry=[".whl"], timeout_s=400)
source docs/wip/device_env.sh || exit 1
S="from megamoe.bench.layer_stages import main; import sys"
ab() {  # ab RECIPE FORMAT "TOKENS": the layer by stage, rule on and FORMAT's rule off
  local recipe=$1 fmt=$2 tokens=$3 shape
  local off="import megamoe.experts.mxfp4_gemm_kernel as m; m.GEMV_MAX_ROWS.pop('$fmt')"
  for shape in deepseek gptoss; do
    A="--recipe $recipe --shape $shape --tokens $tokens --routes uniform skewed --calls 5 --samples 7"
    timeout 100 python3 -c "$S; main(sys.argv[1:])" $A --output-dir /tmp/on-$recipe-$shape > /dev/null 2>&1
    timeout 100 python3 -c "$off; $S; main(sys.argv[1:])" $A \
      --output-dir /tmp/off-$recipe-$shape > /dev/null 2>&1
    { echo "## $recipe $shape, GEMV rule on"; cat /tmp/on-$recipe-$shape/layer_stages.md
      echo "## $recipe $shape, $fmt's GEMV rule off"; cat /tmp/off-$recipe-$shape/layer_stages.md
    } >> $OUT/stages.txt
  done
}
ab mxfp8 mxfp8 1
ab nvfp4 nvfp4 "1 16"
cat $OUT/stages.txt
