# Session 26, device call 1: the two session-25 refactor patches (s25-gate-table.patch,
# s25-decode-step.patch) applied to the tree, main's package in abase/ (untracked, so it
# travels):
#   mkdir abase && git archive main megamoe fixtures oracle | tar -x -C abase
# 1. the MX GPU tests on the patched tree;
# 2. the GEMM alone, patched tree against abase/, all three scale paths (MXFP4 m64n64s3ws:
#    shared-memory run; MXFP4 m64n64s4wsrh: register vectors; MXFP8 m64n64s4wsrh: picked
#    words), DeepSeek, the layer's grid;
# 3. the first-halves twins of gpt-oss's fallback variants (gpu_halves_gptoss.sh's GEMM part).
#   run(command="bash docs/wip/gpu_s26_check.sh", carry=[".whl"], timeout_s=600)
# $OUT gets tests.txt, ab.txt, gemm.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
C="--layer-mcap --cases skewed:1 uniform:16"
E="docs/wip/exp_decode_depth.py"
for w in mxfp4 mxfp8; do
  for tree in patch main; do
    pp=$PYTHONPATH; [ $tree = main ] && pp=$PWD/abase:$PYTHONPATH
    PYTHONPATH=$pp timeout 70 python3 $E --weights $w --configs m64n64s4wsrh m64n64s3ws $C 2>&1 \
      | grep "^|\|Error" | sed "s/^/$tree /" >> $OUT/ab.txt
  done
done
echo "ab done $(( $(date +%s) - t0 )) s" >> $OUT/ab.txt; cat $OUT/ab.txt
C="--shape gptoss --layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16"
timeout 90 python3 $E --weights nvfp4 --configs m64n64s6ws m64n64s6wsh $C >> $OUT/gemm.txt 2>&1
echo "nvfp4 rc=$?" >> $OUT/gemm.txt
timeout 90 python3 $E --weights mxfp8 --configs m64n64s3ws m64n64s3wsh $C >> $OUT/gemm.txt 2>&1
echo "mxfp8 rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gemm.txt
grep "^|\|rc=\|Error" $OUT/gemm.txt
timeout 220 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_mxfp8_kernels.py tests/single/test_nvfp4_kernels.py \
  tests/single/test_scale_regs.py tests/single/test_raster_halves.py > $OUT/tests.txt 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/tests.txt; tail -4 $OUT/tests.txt
