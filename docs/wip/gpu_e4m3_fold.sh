# Session 34: the folded E4M3 decode (branch wip/e4m3-fold) on the H200, one call:
#   1. the mxfp8 kernel, GEMV and layer tests (the exhaustive decode test now runs every
#      MXFP8 variant, the GEMV included);
#   2. the layer by stage, main's decode (tree A: docs/wip/ab_main/ over a copy) against the
#      branch's (tree B), each with its own DSL cache, mxfp8 DeepSeek T = 1 and 4096, both
#      route patterns;
#   3. the paired benchmark against PyTorch on the branch where the time is left.
# Before the call (on the branch): mkdir docs/wip/ab_main and, for f in packed_decode.py
# mx_gemv_kernel.py mxfp4_gemm_kernel.py, git show main:megamoe/experts/$f >
# docs/wip/ab_main/$f (untracked, so it travels with the tree; removed after the call).
#   run(command="bash docs/wip/gpu_e4m3_fold.sh", carry=[".whl"], timeout_s=600)
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
deadline=${MEGAMOE_DEADLINE:-585}
left() { echo $(( deadline - ($(date +%s) - t0) )); }
rm -rf /tmp/A && mkdir -p /tmp/A && cp -r . /tmp/A && cp docs/wip/ab_main/*.py /tmp/A/megamoe/experts/
timeout 270 python3 -m pytest -q -p no:cacheprovider -n 12 tests/single/test_mxfp8_kernels.py \
  tests/single/test_mx_gemv.py tests/single/test_layer.py -k mxfp8 > $OUT/tests.txt 2>&1
echo "tests rc=$? at $(( $(date +%s) - t0 )) s"; tail -n 5 $OUT/tests.txt
S="from megamoe.bench.layer_stages import main; import sys; main(sys.argv[1:])"
for tree in B A; do
  [ "$(left)" -lt 60 ] && { echo "skipped stages $tree: $(left) s left"; continue; }
  d=$PWD; [ $tree = A ] && d=/tmp/A
  (cd $d && CUTE_DSL_CACHE_DIR=/tmp/cc$tree timeout $(( $(left) - 20 )) python3 -c "$S" \
     --recipe mxfp8 --shape deepseek --tokens 1 4096 --routes uniform skewed --calls 5 \
     --samples 7 --output-dir /tmp/st-$tree > /tmp/st-$tree.log 2>&1)
  echo "stages $tree rc=$? at $(( $(date +%s) - t0 )) s"
  { echo "## tree $tree"; cat /tmp/st-$tree/layer_stages.md; } >> $OUT/stages.txt
  tail -n 3 /tmp/st-$tree.log
done
cat $OUT/stages.txt
O="--cache warm --no-control --pairs 3 --rounds 2 --no-plots"
for c in deepseek-uniform-T4096 deepseek-uniform-T1; do
  [ "$(left)" -lt 60 ] && { echo "skipped paired $c: $(left) s left"; continue; }
  CUTE_DSL_CACHE_DIR=/tmp/ccB timeout $(( $(left) - 10 )) python3 -m megamoe.bench layer-mxfp8 \
    $O --case "$c" --output-dir /tmp/pr-$c > /tmp/pr-$c.log 2>&1
  echo "paired $c rc=$?"; grep -h "torch-grouped\|Error" /tmp/pr-$c.log | tail -n 2
  cp /tmp/pr-$c/layer-mxfp8.json $OUT/paired-$c.json 2>/dev/null
done
