# Session 31, device call 2: the GEMV's tests and the layer's contract tests (both GEMM kinds
# of fp8_mxfp4), the GEMM alone past the provisional bound, and the layer by stage with the
# GEMV rule against the same code with the rule off (GEMV_ROUTES patched to 0 in-process).
#   run(command="bash docs/wip/gpu_gemv2.sh", carry=[".whl"], timeout_s=600)
source docs/wip/device_env.sh || exit 1
timeout 230 python3 -m pytest -q -p no:cacheprovider -n 8 tests/single/test_mx_gemv.py \
  tests/single/test_layer.py > $OUT/tests.txt 2>&1
tail -n 12 $OUT/tests.txt
B="python3 -m megamoe.bench.mx_gemm --weights mxfp4 --samples 5"
(timeout 120 $B --shape deepseek --routes uniform --tokens 256 1024 --configs m64n64s4wsrhb4 n16gemv4 --output-dir /tmp/b1
 timeout 60 $B --shape deepseek --routes skewed --tokens 64 256 --configs m64n64s4wsrhb4 n16gemv4 --output-dir /tmp/b2
 timeout 60 $B --shape gptoss --routes uniform --tokens 256 1024 --configs m64n64s4wsrh n16gemv4 --output-dir /tmp/b3
 timeout 60 $B --shape gptoss --routes skewed --tokens 64 256 --configs m64n64s4wsrh n16gemv4 --output-dir /tmp/b4
) 2>&1 | grep "^| mx" > $OUT/bench.txt
cat $OUT/bench.txt
S="from megamoe.bench.layer_stages import main; import sys"
OFF="import megamoe.experts.mxfp4_gemm_kernel as m; m.GEMV_ROUTES = {}"
A="--recipe fp8_mxfp4 --shape deepseek --tokens 1 16 64 --routes uniform skewed --calls 5 --samples 7"
timeout 100 python3 -c "$S; main(sys.argv[1:])" $A --output-dir /tmp/on > $OUT/stages-on.txt 2>&1
timeout 100 python3 -c "$OFF; $S; main(sys.argv[1:])" $A --output-dir /tmp/off > $OUT/stages-off.txt 2>&1
cat /tmp/on/layer_stages.md /tmp/off/layer_stages.md
