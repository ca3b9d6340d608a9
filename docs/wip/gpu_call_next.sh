# The next session's first device call, with docs/wip/s21-mx-depth.patch and then
# docs/wip/s21-scale-prologue.patch applied to main, and a copy of main's code in abase/
# (untracked, so it travels; layer_stages needs the whole package and the scenarios, 1.2 MB;
# python -m puts abase/ first on the path there):
#   git apply docs/wip/s21-mx-depth.patch && git apply docs/wip/s21-scale-prologue.patch
#   mkdir abase && git archive main megamoe fixtures oracle | tar -x -C abase
#   run(command="bash docs/wip/gpu_call_next.sh", carry=[".whl"], timeout_s=570)
# 1. GPU tests: every MX variant (the new m64n64s4ws / m64n64s6ws among them; the batched
#    scale copy in all of them, ragged runs included) and the layer tests (the new narrow
#    defaults at the test shapes).
# 2. The depth experiment where it was not measured: 8 and 32 rows per expert (T = 256, 1024).
# 3. The scale-copy change alone: m64n64s3ws (its code differs from main's only there), this
#    tree against main's, alternating.
# 4. layer_stages, fp8_mxfp4, DeepSeek, this tree then main's (both patches against main).
# At most 8 files come back: everything goes into four text files.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_layer.py > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -2 $OUT/tests.txt
PYTHONPATH=.:$PYTHONPATH timeout 60 python3 docs/wip/exp_decode_depth.py \
  --configs m64n64s3ws m64n64s4ws m64n64s6ws --cases uniform:256 uniform:1024 \
  2>&1 | grep "^|" > $OUT/depth.txt
cat $OUT/depth.txt
B="python3 -m megamoe.bench.mx_gemm --weights mxfp4 --configs m64n64s3ws --samples 5 --calls 5"
for c in "skewed 1" "uniform 16"; do
  set -- $c
  for tree in patch main patch main; do
    d=.; [ $tree = main ] && d=abase
    (cd $d && timeout 25 $B --routes $1 --tokens $2 --output-dir /tmp/b-$tree-$1 2>&1) \
      | grep "^| mxfp4" | sed "s/^/$tree /" >> $OUT/prologue.txt
  done
done
cat $OUT/prologue.txt
L="python3 -m megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 1 16 1024 --routes uniform skewed --calls 5 --samples 7"
for tree in patch main; do
  d=.; [ $tree = main ] && d=abase
  (cd $d && timeout 60 $L --output-dir /tmp/ls-$tree 2>&1) | grep "^| " | sed "s/^/$tree /" \
    >> $OUT/stages.txt
done
cat $OUT/stages.txt
