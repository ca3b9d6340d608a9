# Session 31, device call 6 (the budget's last 280 s): how wide the GEMV's persistent grid
# should be. One process per arm, GEMV_THREADS_PER_SM patched before the kernels compile
# (each arm with its own DSL disk cache, so no arm loads another's kernel): 3072 (four
# waves) and 10**9 (no cap: one CTA per tile, call 2's kernel); main's 768 (one wave) is
# call 3's run (its wgmma arm agreed with call 2's within 0.1 %). DeepSeek fp8_mxfp4 layer
# by stage, T = 1 and 16, uniform and one expert.
#   run(command="bash docs/wip/gpu_gemv_waves.sh", carry=[".whl"], timeout_s=270)
source docs/wip/device_env.sh || exit 1
S="from megamoe.bench.layer_stages import main; import sys"
A="--recipe fp8_mxfp4 --shape deepseek --tokens 1 16 --routes uniform skewed --calls 5 --samples 7"
for w in ${MEGAMOE_WAVES:-3072 1000000000}; do
  P="import megamoe.experts.mx_gemv_kernel as g; g.GEMV_THREADS_PER_SM = $w"
  mkdir -p /tmp/cc$w; CUTE_DSL_CACHE_DIR=/tmp/cc$w timeout 120 python3 -c "$P; $S; main(sys.argv[1:])" $A --output-dir /tmp/w$w > /tmp/w$w.log 2>&1
  { echo "## GEMV_THREADS_PER_SM=$w"; grep "^|" /tmp/w$w/layer_stages.md; } >> $OUT/waves.txt
  tail -n 6 $OUT/waves.txt
done
