# GPU call 1 of the next session (docs/wip/README.md), with both patches applied:
#   run(command="bash docs/wip/gpu_call1.sh", carry=[".whl"], timeout_s=600)
# The new GPU tests, then the GEMM and per-stage benchmarks; every log in one tar under $OUT.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
L=/tmp/logs; mkdir -p $L /tmp/cc
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/smi.txt
timeout 260 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
  tests/single/test_persistent_mx.py tests/single/test_split_k.py \
  tests/single/test_dispatch_layout_kernel.py tests/single/test_mxfp4_gemm_kernel.py \
  tests/single/test_mxfp8_kernels.py tests/single/test_nvfp4_kernels.py > $L/tests.txt 2>&1
echo "tests rc=$?" >> $L/tests.txt
B="python3 -m megamoe.bench.mx_gemm --samples 5 --calls 5"
for r in skewed uniform; do
  timeout 70 $B --weights mxfp4 --routes $r --tokens 1 16 64 \
    --configs m64n64s3ws m64n64s3persistws n64s4ws n64s4persistws --output-dir /tmp/b-$r \
    > $L/mx_gemm-mxfp4-$r.txt 2>&1
done
timeout 90 python3 -m megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 1 16 64 \
  --routes uniform skewed --calls 5 --samples 7 --output-dir /tmp/ls > $L/layer_stages.txt 2>&1
tar czf $OUT/logs.tgz -C /tmp logs
tail -3 $L/tests.txt; grep -h "^| " $L/mx_gemm-*.txt | sort -u; tail -8 $L/layer_stages.txt
