# Session 22's device call for docs/wip/s22-nvfp4-depth.patch (on main, which then held
# kernel digest 43a25152f13c): GPU tests of every NVFP4 variant (the new m64n64s4ws and
# m64n64s6ws among them) and the NVFP4 layer tests, then layer_stages for nvfp4 on the
# patched tree and on a copy of main's code in abase/ (untracked, so it travels):
#   git apply docs/wip/s22-nvfp4-depth.patch
#   mkdir abase && git archive main megamoe fixtures oracle | tar -x -C abase
#   run(command="bash docs/wip/gpu_nvfp4_depth.sh", carry=[".whl"], timeout_s=300)
# About 2 min warm, plus the machine's start. $OUT gets tests.txt and stages.txt (session 22's are
# docs/perf/session22/nvfp4-depth-tests.txt and nvfp4-depth-stages.txt).
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_nvfp4_kernels.py tests/single/test_mxfp4_gemm_kernel.py tests/single/test_layer.py -k nvfp4 > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -2 $OUT/tests.txt
L="python3 -m megamoe.bench.layer_stages --recipe nvfp4 --tokens 1 16 1024 --routes uniform skewed --calls 5 --samples 7"
for tree in patch main; do
  d=.; [ $tree = main ] && d=abase
  (cd $d && timeout 70 $L --output-dir /tmp/ls-$tree 2>&1) | grep "^| " | sed "s/^/$tree /" >> $OUT/stages.txt
done
cat $OUT/stages.txt
