# One device call for the E2M1 byte-permute decode (branch wip-lut / docs/wip/s20-lut-decode.patch):
# the fp4 GEMM GPU tests, then mx_gemm with this tree against main's kernels (abase/, a copy
# of main's megamoe/ package) in the same run. Make abase first (untracked, so it travels; the
# tree must stay under 64 MiB with the cutlass-dsl wheel, so leave out the layer and combine):
#   mkdir abase && git archive main megamoe | tar -x -C abase && rm -rf abase/megamoe/{layer,combine}
# Session 20 ran it on the patch applied to main (docs/perf/session20/lut-decode-*.txt).
#   run(command="bash docs/wip/gpu_lut_decode.sh", carry=[".whl"], timeout_s=330)
source docs/wip/device_env.sh || exit 1
timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_nvfp4_kernels.py tests/single/test_split_k.py > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -2 $OUT/tests.txt
B="python3 -m megamoe.bench.mx_gemm --weights mxfp4 --samples 5 --calls 5 --configs m64n64s3ws"
for c in "uniform 16" "skewed 1"; do
  set -- $c
  for tree in lut main; do
    d=.; [ $tree = main ] && d=abase  # python -m puts the working directory first
    (cd $d && timeout 45 $B --routes $1 --tokens $2 --output-dir /tmp/b-$tree-$1 2>&1) \
      | grep "^| mxfp4" | sed "s/^/$tree /" >> $OUT/bench.txt
  done
done
cat $OUT/bench.txt
