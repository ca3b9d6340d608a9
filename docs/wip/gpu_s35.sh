# Session 35, after the four sanitizers passed on the fold (kernel 681b4e641fab):
#   1. the exhaustive MXFP8 decode test with NaN bytes also under flagged scale bytes
#      (rows 200 and 201, NAN_ROWS; the test half of s34-gemv-lean.patch) on the fold's
#      kernels, which its qualification did not cover;
#   2. programmatic dependent launch on and off (session 34's lead: gpt-oss one expert
#      T = 256 fp8_mxfp4 107.8 us on, 103.0 off): exp_pdl_layer.py, one process per arm,
#      both arms compiled in parallel first, then three ABAB rounds, outputs compared bit
#      for bit between the arms.
#   run(command="bash docs/wip/gpu_s35.sh", carry=[".whl"], timeout_s=600)
# $OUT gets tests.txt and pdl.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
E=docs/wip/exp_pdl_layer.py
A=(--recipes fp8_mxfp4 mxfp8 --shapes gptoss deepseek
   --cases skewed:16 skewed:64 skewed:256 skewed:1024 uniform:256)
MEGAMOE_PDL=0 timeout 240 python3 $E "${A[@]}" --compile-only > /tmp/c0.txt 2>&1 &
MEGAMOE_PDL=1 timeout 240 python3 $E "${A[@]}" --compile-only > /tmp/c1.txt 2>&1 &
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 tests/single/test_mxfp8_kernels.py \
  -k "mxfp8_decode" > $OUT/tests.txt 2>&1
echo "tests rc=$? at $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/tests.txt
wait
grep -h "Error\|error" /tmp/c0.txt /tmp/c1.txt | head -40 > $OUT/pdl.txt
echo "compile done $(( $(date +%s) - t0 )) s" >> $OUT/pdl.txt
for i in 1 2 3; do
  for arm in 0 1; do
    [ $(( $(date +%s) - t0 )) -gt 440 ] && { echo "skipped arm $arm round $i" >> $OUT/pdl.txt; continue; }
    MEGAMOE_PDL=$arm timeout 120 python3 $E "${A[@]}" --save /tmp/out-$arm.pt 2>&1 \
      | grep "^|\|Error" >> $OUT/pdl.txt
    echo "arm $arm round $i done $(( $(date +%s) - t0 )) s" >> $OUT/pdl.txt
  done
done
python3 $E --compare /tmp/out-0.pt /tmp/out-1.pt >> $OUT/pdl.txt 2>&1
echo "all done $(( $(date +%s) - t0 )) s" >> $OUT/pdl.txt
cat $OUT/pdl.txt
