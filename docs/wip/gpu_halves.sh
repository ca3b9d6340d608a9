# Session 25: the first-halves raster (KernelConfig.halves, m64n64s4wsrh) on the GPU:
# its tests (every live row bit for bit its twin's in the layer's kind of grid, and the MX
# tests' wsrh cases), the GEMM alone against m64n64s4wsr in the layer's grid
# (exp_decode_depth.py --layer-mcap; every live row bitwise equal to the first column), and
# the whole DeepSeek layer by stage with the narrow default swapped for it
# (with_narrow.py) against the default, three quantized recipes.
#   run(command="bash docs/wip/gpu_halves.sh", carry=[".whl"], timeout_s=600)
# (Ran once, before landing: on main since then both arms take m64n64s4wsrh, so the A/B
# needs the with_narrow.py rule set back to m64n64s4wsr for the "main" arm.)
# $OUT gets tests.txt, gemm.txt and stages.txt.
source docs/wip/device_env.sh || exit 1
timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_raster_halves.py \
  tests/single/test_mxfp4_gemm_kernel.py tests/single/test_mxfp8_kernels.py \
  tests/single/test_nvfp4_kernels.py -k "halves or wsrh" > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -3 $OUT/tests.txt
C="--layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16"
for w in mxfp4 mxfp8; do
  timeout 75 python3 docs/wip/exp_decode_depth.py --weights $w --configs m64n64s4wsr m64n64s4wsrh $C >> $OUT/gemm.txt 2>&1
  echo "$w rc=$?" >> $OUT/gemm.txt
done
grep "^|\|rc=\|Error" $OUT/gemm.txt
for recipe in fp8_mxfp4 mxfp8 nvfp4; do
  rule=${recipe#fp8_}=m64n64s4wsrh:3,m64n64s6ws:2
  [ $recipe = mxfp8 ] && rule=mxfp8=m64n64s4wsrh:3
  L="megamoe.bench.layer_stages --recipe $recipe --tokens 1 16 256 --routes uniform skewed --calls 5 --samples 7"
  timeout 80 python3 -m megamoe.bench.layer_stages ${L#megamoe.bench.layer_stages} --output-dir /tmp/ls-$recipe-main 2>&1 | grep "^| \|Error" | sed "s/^/$recipe main /" >> $OUT/stages.txt
  timeout 80 python3 docs/wip/with_narrow.py $rule -- $L --output-dir /tmp/ls-$recipe-h 2>&1 | grep "^| \|^#\|Error" | sed "s/^/$recipe halves /" >> $OUT/stages.txt
done
cat $OUT/stages.txt
