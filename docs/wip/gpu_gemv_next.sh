# For the session after 31: s31-gemv-next.patch on the GPU before its qualification. Apply
# the patch on main first (git apply docs/wip/s31-gemv-next.patch), then
#   run(command="bash docs/wip/gpu_gemv_next.sh", carry=[".whl"], timeout_s=600)
# 1. the GEMV tests of every format and the MX GEMM suites that parametrize over the compiled
#    variants (the GEMVs of MXFP8 and NVFP4 included); 2. the GEMM alone, MXFP8 and NVFP4
#    GEMVs against their narrow defaults at DeepSeek's K (MXFP8 m64n64s4wsrh, NVFP4
#    m64n64s4wsrhb4; at gpt-oss's K they are m64n64s3wsh / m64n64s6wsh), to set their
#    GEMV_MAX_ROWS.
source docs/wip/device_env.sh || exit 1
timeout 260 python3 -m pytest -q -p no:cacheprovider -n 10 tests/single/test_mx_gemv.py \
  tests/single/test_mxfp8_kernels.py tests/single/test_nvfp4_kernels.py \
  tests/single/test_mxfp4_gemm_kernel.py > $OUT/tests.txt 2>&1
tail -n 6 $OUT/tests.txt
B="python3 -m megamoe.bench.mx_gemm --samples 5"
for pair in mxfp8:m64n64s4wsrh nvfp4:m64n64s4wsrhb4; do
  w=${pair%%:*}; d=${pair#*:}
  timeout 80 $B --weights $w --shape deepseek --routes uniform --tokens 1 16 --configs $d n16gemv4 --output-dir /tmp/$w-u 2>&1 | grep "^| $w" | sort -u >> $OUT/bench.txt
  timeout 60 $B --weights $w --shape deepseek --routes skewed --tokens 1 16 32 --configs $d n16gemv4 --output-dir /tmp/$w-s 2>&1 | grep "^| $w" | sort -u >> $OUT/bench.txt
done
cat $OUT/bench.txt
