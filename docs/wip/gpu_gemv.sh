# Session 31, device call 1: the decode-batch GEMV (``megamoe.experts.mx_gemv_kernel``) on the
# GPU: its tests, then the GEMM alone (``megamoe.bench.mx_gemm``) against the narrow defaults.
#   run(command="bash docs/wip/gpu_gemv.sh", carry=[".whl"], timeout_s=600)
source docs/wip/device_env.sh || exit 1
python3 -m pytest -q -p no:cacheprovider tests/single/test_mx_gemv.py \
  "tests/single/test_mxfp4_gemm_kernel.py" -k "gemv" > $OUT/tests.txt 2>&1
tail -n 15 $OUT/tests.txt
B="python3 -m megamoe.bench.mx_gemm --weights mxfp4 --samples 5"
C="m64n64s4wsrhb4 m64n64s4wsrh n16gemv4 n16gemv8"
$B --shape deepseek --routes uniform --tokens 1 4 16 64 --configs $C --output-dir /tmp/b1 2>&1 | grep "^|" > $OUT/bench.txt
$B --shape deepseek --routes skewed --tokens 1 16 --configs $C --output-dir /tmp/b2 2>&1 | grep "^|" >> $OUT/bench.txt
$B --shape gptoss --routes uniform --tokens 1 16 64 --configs $C --output-dir /tmp/b3 2>&1 | grep "^|" >> $OUT/bench.txt
$B --shape gptoss --routes skewed --tokens 1 16 --configs $C --output-dir /tmp/b4 2>&1 | grep "^|" >> $OUT/bench.txt
cat $OUT/bench.txt
