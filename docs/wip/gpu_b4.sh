# Session 27: four bf16 B tiles (`KernelConfig.b_tiles`, name suffix `b4`) where the CTAs
# per SM allow, against each narrow default, GEMM alone in the layer's grid, both shapes,
# every live row compared bit for bit with the first variant; then the DeepSeek
# `fp8_mxfp4` layer by stage with MXFP4's rule swapped (`with_narrow.py`) against main's.
# Session 27's first call found `m64n64s4wsrhb4` 3-7 % faster than `m64n64s4wsrh` at
# DeepSeek MXFP4 uniform batches (docs/perf.md "Session 27").
#   run(command="bash docs/wip/gpu_b4.sh", carry=[".whl"], timeout_s=600)
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
X="python3 docs/wip/exp_decode_depth.py --layer-mcap"
D4="m64n64s4wsrh m64n64s4wsrhb4"
D8="m64n64s4wsrh m64n64s3wsrhb4 m64n64s4wsrhb4"
G4="m64n64s4wsrh m64n64s3wsrhb4"
G8="m64n64s3wsh m64n64s3wshb4"
GN="m64n64s6wsh m64n64s3wshb4 m64n64s6wshb4"
# phase 1: compile every variant (the DSL's disk cache), six processes at once
precompile "--weights mxfp4 --configs $D4" "--weights nvfp4 --configs $D4" \
  "--weights mxfp8 --configs $D8" "--shape gptoss --weights mxfp4 --configs $G4" \
  "--shape gptoss --weights mxfp8 --configs $G8" "--shape gptoss --weights nvfp4 --configs $GN"
echo "compiled $(( $(date +%s) - t0 )) s" | tee $OUT/gemm.txt
C="skewed:1 skewed:16 uniform:1 uniform:16 uniform:64 uniform:256"
$X --weights mxfp4 --configs $D4 --cases $C uniform:1024 >> $OUT/gemm.txt 2>&1
$X --weights nvfp4 --configs $D4 --cases $C >> $OUT/gemm.txt 2>&1
$X --weights mxfp8 --configs $D8 --cases $C >> $OUT/gemm.txt 2>&1
$X --shape gptoss --weights mxfp4 --configs $G4 --cases $C >> $OUT/gemm.txt 2>&1
$X --shape gptoss --weights mxfp8 --configs $G8 --cases $C >> $OUT/gemm.txt 2>&1
$X --shape gptoss --weights nvfp4 --configs $GN --cases $C >> $OUT/gemm.txt 2>&1
echo "gemm done $(( $(date +%s) - t0 )) s" >> $OUT/gemm.txt
L="megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 1 16 256 --routes uniform skewed --calls 5 --samples 7"
timeout 100 python3 -m $L --output-dir /tmp/ls-main 2>&1 | grep "^| \|Error" | sed "s/^/main /" >> $OUT/stages.txt
timeout 100 python3 docs/wip/with_narrow.py mxfp4=m64n64s4wsrhb4:3,m64n64s6wsh:2 -- $L \
  --output-dir /tmp/ls-b4 2>&1 | grep "^| \|^#\|Error" | sed "s/^/b4 /" >> $OUT/stages.txt
echo "all done $(( $(date +%s) - t0 )) s" >> $OUT/stages.txt
grep "^|\|Error\|done\|compiled" $OUT/gemm.txt; cat $OUT/stages.txt
