# Session 31, device call 3: the persistent GEMV and the token-capacity rule
# (GEMV_MAX_ROWS): its tests and the layer's contract tests, then the layer by stage with
# the rule against the same code with it off (GEMV_MAX_ROWS emptied in-process), DeepSeek
# and gpt-oss, and the GEMM alone at one expert and uniform T = 16.
#   run(command="bash docs/wip/gpu_gemv3.sh", carry=[".whl"], timeout_s=600)
source docs/wip/device_env.sh || exit 1
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 10 tests/single/test_mx_gemv.py \
  tests/single/test_layer.py tests/single/test_mxfp4_gemm_kernel.py -k "gemv or layer" > $OUT/tests.txt 2>&1
tail -n 4 $OUT/tests.txt
S="from megamoe.bench.layer_stages import main; import sys"
OFF="import megamoe.experts.mxfp4_gemm_kernel as m; m.GEMV_MAX_ROWS = {}"
for shape in deepseek gptoss; do
  A="--recipe fp8_mxfp4 --shape $shape --tokens 1 4 16 --routes uniform skewed --calls 5 --samples 7"
  timeout 90 python3 -c "$S; main(sys.argv[1:])" $A --output-dir /tmp/on-$shape > /dev/null 2>&1
  timeout 90 python3 -c "$OFF; $S; main(sys.argv[1:])" $A --output-dir /tmp/off-$shape > /dev/null 2>&1
  { echo "## $shape on"; cat /tmp/on-$shape/layer_stages.md; echo "## $shape off"; cat /tmp/off-$shape/layer_stages.md; } >> $OUT/stages.txt
done
cat $OUT/stages.txt
timeout 80 python3 -m megamoe.bench.mx_gemm --weights mxfp4 --samples 5 --shape deepseek --routes skewed --tokens 1 16 32 --configs m64n64s4wsrhb4 n16gemv4 n16gemv8 --output-dir /tmp/b1 2>&1 | grep "^| mx" | sort -u > $OUT/bench.txt
cat $OUT/bench.txt
