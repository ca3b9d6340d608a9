# Session 24's prepared device call (not run yet): what the CTAs past the live tiles cost
# the MX GEMM at one expert (docs/wip/exp_dead_ctas.py: an M_cap sweep of the GEMM alone,
# then a probe kernel that records which SM each CTA of the layer's and the benchmark's
# grids lands on), and session 24's exp_fc1_gap.py again at skewed T = 16 for scale.
#   run(command="bash docs/wip/gpu_dead_ctas.sh", carry=[".whl"], timeout_s=300)
# About 90 s warm (exp_fc1_gap.py took 56 s with a cold start in session 24).
# $OUT gets dead.txt.
source docs/wip/device_env.sh || exit 1
timeout 150 python3 docs/wip/exp_dead_ctas.py placement sweep > $OUT/dead.txt 2>&1
echo "dead rc=$?" >> $OUT/dead.txt
timeout 80 python3 docs/wip/exp_fc1_gap.py --recipe fp8_mxfp4 --cases skewed:16 >> $OUT/dead.txt 2>&1
echo "gap rc=$?" >> $OUT/dead.txt
grep "^|\|rc=\|Error\|probe:" $OUT/dead.txt
