# Session 25 prepared, session 26 ran (docs/perf.md "Session 26" item 5): the layer against
# PyTorch for the columns "Where the layer stands" took from session 24 (kernel
# bcd0380a2706): nvfp4 both shapes, fp8_mxfp4 and mxfp8 at gpt-oss. Protocol as
# docs/perf.md "Session 25" item 3. Then, on the host: python -m devtools.roofline <json>.
#   run(command="bash docs/wip/gpu_layer_rerun.sh", carry=[".whl"], timeout_s=600)
# About 50-70 s per run, 4 runs (189 s warm in session 26).
source docs/wip/device_env.sh || exit 1
O="--cache warm --no-control --pairs 3 --rounds 2 --no-plots"
for job in layer-nvfp4:deepseek layer-nvfp4:gptoss layer-fp8-mxfp4:gptoss layer-mxfp8:gptoss; do
  s=${job%%:*}; m=${job##*:}
  timeout 140 python3 -m megamoe.bench $s $O --case "$m-*" --output-dir $OUT/$s-$m 2>&1 | grep "torch-grouped\|ceiling\|Error"
done
# Session 26: MXFP4's fallback twin (m64n64s6wsh, taken by analogy with NVFP4's) in the GEMM
# alone at gpt-oss's shape (printed, not a file: the benches above fill the 8 files).
timeout 80 python3 docs/wip/exp_decode_depth.py --weights mxfp4 --configs m64n64s6ws m64n64s6wsh \
  --shape gptoss --layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16 2>&1 | grep "^|\|Error"
