# Prepared in session 25, not run: the layer against PyTorch for the cases "Where the layer
# stands" still takes from session 24 (kernel bcd0380a2706), on main's kernel with the
# first-halves raster: nvfp4 both shapes, fp8_mxfp4 and mxfp8 at gpt-oss. Protocol as
# docs/perf.md "Session 25" item 3. Then, on the host: python -m devtools.roofline <json>.
#   run(command="bash docs/wip/gpu_layer_rerun.sh", carry=[".whl"], timeout_s=600)
# About 50-70 s per run, 4 runs.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
O="--cache warm --no-control --pairs 3 --rounds 2 --no-plots"
for job in layer-nvfp4:deepseek layer-nvfp4:gptoss layer-fp8-mxfp4:gptoss layer-mxfp8:gptoss; do
  s=${job%%:*}; m=${job##*:}
  timeout 140 python3 -m megamoe.bench $s $O --case "$m-*" --output-dir $OUT/$s-$m 2>&1 | grep "torch-grouped\|ceiling\|Error"
done
