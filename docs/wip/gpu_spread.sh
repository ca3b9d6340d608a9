# Session 24's prepared device call for docs/wip/s24-raster-spread.patch (not run yet):
# the spread variants' GPU tests (every live row bit for bit its twin's in a grid far past
# the live rows, and the existing MX tests' x8 cases), the CTA-placement probe and the
# M_cap sweep (exp_dead_ctas.py), then the spread raster against the default narrow
# variant in the layer's grid (exp_decode_depth.py
# --layer-mcap: M_cap for the case's route capacity, as the layer sizes it; every live row
# bitwise equal to the first column, then timed).
#   git apply docs/wip/s24-raster-spread.patch
#   run(command="bash docs/wip/gpu_spread.sh", carry=[".whl"], timeout_s=600)
# $OUT gets tests.txt, dead.txt and spread.txt. At most 580 s
# of timeouts; an estimate of 5-7 min warm (none of it has run).
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci
mkdir -p /tmp/cc
timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_raster_spread.py \
  tests/single/test_mxfp4_gemm_kernel.py tests/single/test_mxfp8_kernels.py \
  tests/single/test_nvfp4_kernels.py -k "spread or wsrx8" > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -3 $OUT/tests.txt
timeout 110 python3 docs/wip/exp_dead_ctas.py placement sweep > $OUT/dead.txt 2>&1
echo "dead rc=$?" >> $OUT/dead.txt
grep "^|\|rc=\|Error\|probe:" $OUT/dead.txt
C="--layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16 uniform:256"
E="python3 docs/wip/exp_decode_depth.py"
timeout 150 $E --weights mxfp4 --configs m64n64s4wsr m64n64s4wsrx8 m64n64s4wsrx16 $C > $OUT/spread.txt 2>&1
echo "mxfp4 rc=$?" >> $OUT/spread.txt
timeout 150 $E --weights mxfp8 --configs m64n64s4wsr m64n64s4wsrx8 m64n64s4wsrx16 $C >> $OUT/spread.txt 2>&1
echo "mxfp8 rc=$?" >> $OUT/spread.txt
grep "^|\|rc=\|Error" $OUT/spread.txt
