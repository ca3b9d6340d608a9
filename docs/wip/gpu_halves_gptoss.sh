# Prepared in session 25, not run: the first-halves raster (KernelConfig.halves) on the
# narrow variants gpt-oss takes where m64n64s4wsrh keeps too few CTAs (K = 2880: NVFP4
# m64n64s6ws, MXFP8 m64n64s3ws; MXFP4 already takes m64n64s4wsrh there). Both "h" twins are
# parsed and compiled per process (exp_decode_depth.add_variants; both compile through the
# offline gate's path on the CPU). GEMM alone in the layer's grid (every live row bitwise
# equal to the first column), then the gpt-oss layer by stage, default against the rule
# with the twin (with_narrow.py).
#   run(command="bash docs/wip/gpu_halves_gptoss.sh", carry=[".whl"], timeout_s=600)
# $OUT gets gemm.txt and stages.txt. Estimate 4-5 min warm.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
C="--shape gptoss --layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16"
E="python3 docs/wip/exp_decode_depth.py"
timeout 100 $E --weights nvfp4 --configs m64n64s6ws m64n64s6wsh $C >> $OUT/gemm.txt 2>&1
echo "nvfp4 rc=$?" >> $OUT/gemm.txt
timeout 100 $E --weights mxfp8 --configs m64n64s3ws m64n64s3wsh $C >> $OUT/gemm.txt 2>&1
echo "mxfp8 rc=$?" >> $OUT/gemm.txt
grep "^|\|rc=\|Error" $OUT/gemm.txt
for recipe in nvfp4 mxfp8; do
  rule="nvfp4=m64n64s4wsrh:3,m64n64s6wsh:2"
  [ $recipe = mxfp8 ] && rule="mxfp8=m64n64s4wsrh:3,m64n64s3wsh:1"
  L="megamoe.bench.layer_stages --shape gptoss --recipe $recipe --tokens 1 16 256 --routes uniform skewed --calls 5 --samples 7"
  timeout 90 python3 -m $L --output-dir /tmp/ls-$recipe-main 2>&1 | grep "^| \|Error" | sed "s/^/$recipe main /" >> $OUT/stages.txt
  timeout 90 python3 docs/wip/with_narrow.py $rule -- $L --output-dir /tmp/ls-$recipe-h 2>&1 | grep "^| \|^#\|Error" | sed "s/^/$recipe halves /" >> $OUT/stages.txt
done
cat $OUT/stages.txt
