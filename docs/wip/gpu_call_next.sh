# The next session's first device call, with docs/wip/s21-mx-depth.patch applied to main and
# a copy of main's code in abase/ (untracked, so it travels; layer_stages needs the whole
# package and the scenarios, 1.2 MB; python -m puts abase/ first on the path there):
#   mkdir abase && git archive main megamoe fixtures oracle | tar -x -C abase
#   run(command="bash docs/wip/gpu_call_next.sh", carry=[".whl"], timeout_s=570)
# 1. GPU tests: every MXFP4 variant (the new m64n64s4ws / m64n64s6ws among them) and the
#    layer tests (the new narrow defaults at the test shapes).
# 2. The depth experiment where it was not measured: 32 rows per expert (T = 1024).
# 3. layer_stages, fp8_mxfp4, this tree then main's, DeepSeek then gpt-oss (at most 60 s each).
# At most 8 files come back: everything goes into three text files.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_layer.py > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -2 $OUT/tests.txt
for s in deepseek gptoss; do
  PYTHONPATH=.:$PYTHONPATH timeout 60 python3 docs/wip/exp_decode_depth.py --shape $s \
    --configs m64n64s3ws m64n64s4ws m64n64s6ws --cases uniform:256 uniform:1024 skewed:1024 \
    2>&1 | grep "^|" >> $OUT/depth.txt
done
cat $OUT/depth.txt
L="python3 -m megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 1 16 1024 --routes uniform skewed --calls 5 --samples 7"
for s in deepseek gptoss; do
  for tree in depth main; do
    d=.; [ $tree = main ] && d=abase  # python -m puts the working directory first
    (cd $d && timeout 60 $L --shape $s --output-dir /tmp/ls-$tree-$s 2>&1) | grep "^| " \
      | sed "s/^/$tree $s /" >> $OUT/stages.txt
  done
done
grep -i "forward\|fc1\|fc2" $OUT/stages.txt | head -60
