# Session 27 (prepared, not run): the decode's store addresses computed once per thread
# (`docs/wip/s27-store-chunks.patch`: `store_chunks`; each k tile adds `buf * tile_chunks`
# instead of recomputing the swizzled offsets) against main, in one call:
#   git apply docs/wip/s27-store-chunks.patch
#   mkdir abase && git archive main megamoe fixtures oracle | tar -x -C abase
#   run(command="bash docs/wip/gpu_store_chunks.sh", carry=[".whl"], timeout_s=600)
# 1. the SASS opcode mix of the narrow defaults in both trees (docs/wip/sass_mix.py; needs
#    cuobjdump or nvdisasm on the device, else only the totals);
# 2. the GEMM alone, patched tree against abase/, the narrow defaults of every format and
#    the shared-memory scale path (MXFP4 m64n64s3ws), DeepSeek, the layer's grid;
# 3. the MX GPU tests on the patched tree.
# $OUT gets sass.txt, ab.txt, tests.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
for tree in patch main; do
  pp=$PYTHONPATH; [ $tree = main ] && pp=$PWD/abase:$PYTHONPATH
  for spec in "mxfp4 m64n64s4wsrhb4 m64n64s3ws" "nvfp4 m64n64s4wsrhb4" "mxfp8 m64n64s4wsrh"; do
    set -- $spec; w=$1; shift
    PYTHONPATH=$pp timeout 120 python3 docs/wip/sass_mix.py --weights $w --configs "$@" 2>&1 \
      | sed "s/^/$tree /" >> $OUT/sass.txt
  done
done
echo "sass done $(( $(date +%s) - t0 )) s" >> $OUT/sass.txt
C="--layer-mcap --cases skewed:1 uniform:1 uniform:16 uniform:64"
for spec in "mxfp4 m64n64s4wsrhb4 m64n64s3ws" "nvfp4 m64n64s4wsrhb4" "mxfp8 m64n64s4wsrh"; do
  set -- $spec; w=$1; shift
  for tree in patch main; do
    pp=$PYTHONPATH; [ $tree = main ] && pp=$PWD/abase:$PYTHONPATH
    PYTHONPATH=$pp timeout 100 python3 docs/wip/exp_decode_depth.py --weights $w --configs "$@" \
      $C 2>&1 | grep "^|\|Error" | sed "s/^/$tree /" >> $OUT/ab.txt
  done
done
echo "ab done $(( $(date +%s) - t0 )) s" >> $OUT/ab.txt
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_mxfp8_kernels.py tests/single/test_nvfp4_kernels.py \
  tests/single/test_scale_regs.py tests/single/test_raster_halves.py > $OUT/tests.txt 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/tests.txt
cat $OUT/sass.txt $OUT/ab.txt; tail -3 $OUT/tests.txt
