# Session 32, device call 1: the GEMV's register ring (KernelConfig.stages: a warp loads
# step i + stages - 1's weights while it multiplies step i) and the MXFP8 / NVFP4 GEMVs
# (s31-gemv-next.patch, applied). Compiled for this call: MXFP4 n16gemv4 / n16gemv8 /
# n16s2gemv4 / n16s3gemv4 / n16s2gemv8, MXFP8 and NVFP4 n16gemv4 / n16s2gemv4 / n16s3gemv4.
#   run(command="bash docs/wip/gpu_gemv_ring.sh", carry=[".whl"], timeout_s=600)
# 1. the kernels compile into the DSL disk cache, one warm_variants.py process per format,
#    shape and variant, in the background while 2. the GEMV tests of every format run (and the
#    other GEMM suites' GEMV cases); 3. exp_decode_depth.py (the layer's grid: --layer-mcap)
#    compares every live row of each variant bit for bit with the first and times them.
source docs/wip/device_env.sh || exit 1
G4="n16gemv4 n16s2gemv4 n16s3gemv4"
declare -a P=(
  "--weights mxfp4 --shape deepseek --configs" "--weights mxfp4 --shape gptoss --configs"
  "--weights mxfp8 --shape deepseek --configs" "--weights nvfp4 --shape deepseek --configs"
  "--weights mxfp8 --shape gptoss --configs" "--weights nvfp4 --shape gptoss --configs")
declare -a C=("$G4 n16gemv8 n16s2gemv8" "$G4 n16gemv8 n16s2gemv8" "$G4 m64n64s4wsrh"
  "$G4 m64n64s4wsrhb4" "$G4 m64n64s3wsh" "$G4 m64n64s6wsh")
i=0; t0=$(date +%s)
for j in 0 1 2 3 4 5; do
  for c in ${C[$j]}; do
    timeout 300 python3 docs/wip/warm_variants.py ${P[$j]} $c \
      > /tmp/pre-$i.txt 2>&1 &
    i=$((i + 1))
  done
done
# MEGAMOE_BENCH_ONLY=1: the timed part only (the second call of session 32, after the first
# ran the tests and lost its timings to a PYTHONPATH that hid the packed DSL)
if [ -z "${MEGAMOE_BENCH_ONLY:-}" ]; then
  timeout 280 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE tests/single/test_mx_gemv.py \
    > $OUT/tests.txt 2>&1
  echo "gemv tests rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
fi
wait
echo "precompiled at $(( $(date +%s) - t0 )) s"; grep -l -E "Error|Traceback" /tmp/pre-*.txt | head
cat $(grep -l -E "Error|Traceback" /tmp/pre-*.txt | head -1) 2>/dev/null | tail -n 20 > $OUT/precompile-error.txt
if [ -z "${MEGAMOE_BENCH_ONLY:-}" ]; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider -n 12 -rfE -k gemv \
    tests/single/test_mxfp8_kernels.py tests/single/test_nvfp4_kernels.py \
    tests/single/test_mxfp4_gemm_kernel.py > $OUT/tests2.txt 2>&1
  echo "suites' gemv cases rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests2.txt
  tail -n 3 $OUT/tests.txt $OUT/tests2.txt
fi
X="python3 docs/wip/exp_decode_depth.py --layer-mcap"
for j in 0 1 2 3; do
  timeout 70 $X ${P[$j]} ${C[$j]} --cases uniform:1 uniform:16 uniform:32 skewed:1 skewed:16 \
    skewed:32 > /tmp/bench-$j.txt 2>&1; grep "^|" /tmp/bench-$j.txt >> $OUT/bench.txt
  grep -q "^| $(echo ${P[$j]} | cut -d' ' -f2)" /tmp/bench-$j.txt || tail -n 5 /tmp/bench-$j.txt >> $OUT/bench.txt
done
for j in 4 5; do
  timeout 50 $X ${P[$j]} ${C[$j]} --cases uniform:16 skewed:1 skewed:32 2>&1 | grep "^|" >> $OUT/bench.txt
done
echo "done at $(( $(date +%s) - t0 )) s" >> $OUT/bench.txt
cat $OUT/bench.txt
