# Session 26: two bf16 B tiles instead of CONVERT_BUFS = 3 in the specialized MX GEMM
# (KernelConfig.b_tiles, name suffix "b2"; in main since session 27).
# Two tiles free 8 KiB a CTA: a 5-stage register variant keeps three CTAs per SM at
# DeepSeek (m64n64s5wsrhb2, 68 KiB), and where gpt-oss's K = 2880 keeps the scale run a
# 4-stage one does too (m64n64s4wsrhb2: NVFP4 69, MXFP8 71 KiB; without b2 77 / 79, two).
# GEMM alone in the layer's grid, each variant against the narrow default (first column;
# every live row bitwise equal to it), parsed per process.
#   run(command="bash docs/wip/gpu_b2.sh", carry=[".whl"], timeout_s=300)
# $OUT gets gemm.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
C="--layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16"
E="timeout 55 python3 docs/wip/exp_decode_depth.py"
$E --weights mxfp8 --shape gptoss --configs m64n64s3wsh m64n64s4wsrhb2 $C >> $OUT/gemm.txt 2>&1
$E --weights nvfp4 --shape gptoss --configs m64n64s6wsh m64n64s4wsrhb2 $C >> $OUT/gemm.txt 2>&1
$E --weights mxfp4 --configs m64n64s4wsrh m64n64s5wsrhb2 m64n64s4wsrhb2 $C >> $OUT/gemm.txt 2>&1
$E --weights mxfp8 --configs m64n64s4wsrh m64n64s4wsrhb2 $C >> $OUT/gemm.txt 2>&1
$E --weights nvfp4 --configs m64n64s4wsrh m64n64s5wsrhb2 $C >> $OUT/gemm.txt 2>&1
echo "done $(( $(date +%s) - t0 )) s" >> $OUT/gemm.txt
grep "^|\|Error\|done" $OUT/gemm.txt
