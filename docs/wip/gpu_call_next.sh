# The next session's first device call, with docs/wip/s20-lut-decode.patch and then
# docs/wip/s20-m64n32-variant.patch applied (README here):
#   run(command="bash docs/wip/gpu_call_next.sh", carry=[".whl"], timeout_s=420)
# GPU tests of the fp4 GEMMs (every MXFP4 variant, m64n32s3ws among them, and the exhaustive
# decode tests), then m64n64s3ws against m64n32s3ws, DeepSeek, skewed and uniform T = 1, 16, 64.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_nvfp4_kernels.py tests/single/test_split_k.py > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -2 $OUT/tests.txt
for r in skewed uniform; do
  timeout 80 python3 -m megamoe.bench.mx_gemm --weights mxfp4 --routes $r --tokens 1 16 64 \
    --configs m64n64s3ws m64n32s3ws --samples 5 --calls 5 --output-dir /tmp/b-$r 2>&1 \
    | grep "^| " >> $OUT/bench.txt
done
cat $OUT/bench.txt
