# For the session after s34-e4m3-fold.patch lands: s34-gemv-lean.patch (on top of it) takes
# the branch and the zero fill out of the GEMV's inner loop. Nsight Compute's SASS counts
# (docs/perf.md "Session 34" item 3) showed, per MMA, a WARPSYNC and a NOP (the reconvergence
# around the second token group's MMA, skipped under `live1`) and a CS2R (zeroing the
# activation registers before a predicated load): about 16 % of the MXFP4 GEMV's executed
# instructions, on a kernel that is 60-76 % issue-busy at uniform routes. The patch issues
# both groups' MMAs always and loads the activations of a token past the live rows from the
# last live row (a clamped index; those columns are never stored). Host: the compile gate's
# GEMV cubins lose 11-12 % of their static instructions for MXFP4 / NVFP4, 2 % for MXFP8, and
# gain 2 registers. Not run on a GPU yet. This call: tree A = the checkout (main with the
# fold), tree B = a copy with the patch, each with its own DSL cache:
#   1. the GEMV, layer-GEMV and exhaustive MXFP8 decode tests on tree B;
#   2. the GEMV alone (the layer's grid), DeepSeek, three formats, both trees;
#   3. the fp8_mxfp4 layer by stage, DeepSeek T = 1 and 16, both route patterns, both trees.
#   run(command="bash docs/wip/gpu_gemv_lean.sh", carry=[".whl"], timeout_s=600)
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
deadline=${MEGAMOE_DEADLINE:-585}
left() { echo $(( deadline - ($(date +%s) - t0) )); }
rm -rf /tmp/B && mkdir -p /tmp/B && cp -r . /tmp/B \
  && (cd /tmp/B && git apply docs/wip/s34-gemv-lean.patch) || { echo "patch failed"; exit 1; }
in_tree B timeout 240 python3 -m pytest -q -p no:cacheprovider -n 12 \
  tests/single/test_mx_gemv.py tests/single/test_layer.py tests/single/test_mxfp8_kernels.py \
  -k "gemv or mxfp8_decode" > $OUT/tests.txt 2>&1
echo "tests B rc=$? at $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/tests.txt
for w in mxfp4 nvfp4 mxfp8; do
  for tree in A B; do
    [ "$(left)" -lt 120 ] && { echo "skipped gemv $w $tree: $(left) s left"; continue; }
    { echo "## tree $tree"; in_tree $tree timeout 60 python3 docs/wip/exp_decode_depth.py \
        --layer-mcap --weights $w --configs n16gemv4 \
        --cases uniform:1 uniform:16 skewed:1 skewed:16 2>&1 | grep "^|\|Error"; } >> $OUT/gemv.txt
  done
done
S="from megamoe.bench.layer_stages import main; import sys; main(sys.argv[1:])"
for tree in A B; do
  [ "$(left)" -lt 40 ] && { echo "skipped stages $tree: $(left) s left"; continue; }
  in_tree $tree timeout $(( $(left) - 10 )) python3 -c "$S" --recipe fp8_mxfp4 \
     --shape deepseek --tokens 1 16 --routes uniform skewed --calls 5 --samples 7 \
     --output-dir /tmp/st-$tree > /tmp/st-$tree.log 2>&1
  { echo "## tree $tree"; cat /tmp/st-$tree/layer_stages.md; } >> $OUT/stages.txt
done
cat $OUT/gemv.txt $OUT/stages.txt
