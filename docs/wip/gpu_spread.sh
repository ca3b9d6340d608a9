# Session 24's prepared device call for docs/wip/s24-raster-spread.patch (not run yet):
# first the CTA-placement probe and the M_cap sweep (exp_dead_ctas.py), then the spread
# raster against the default narrow variant in the layer's grid (exp_decode_depth.py
# --layer-mcap: M_cap for the case's route capacity, as the layer sizes it; every live row
# bitwise equal to the first column, then timed).
#   git apply docs/wip/s24-raster-spread.patch
#   run(command="bash docs/wip/gpu_spread.sh", carry=[".whl"], timeout_s=480)
# $OUT gets dead.txt and spread.txt.
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci
mkdir -p /tmp/cc
timeout 120 python3 docs/wip/exp_dead_ctas.py placement sweep > $OUT/dead.txt 2>&1
echo "dead rc=$?" >> $OUT/dead.txt
grep "^|\|rc=\|Error\|probe:" $OUT/dead.txt
C="--layer-mcap --cases skewed:1 skewed:16 uniform:1 uniform:16 uniform:256"
E="python3 docs/wip/exp_decode_depth.py"
timeout 160 $E --weights mxfp4 --configs m64n64s4wsr m64n64s4wsrx8 m64n64s4wsrx16 $C > $OUT/spread.txt 2>&1
echo "mxfp4 rc=$?" >> $OUT/spread.txt
timeout 160 $E --weights mxfp8 --configs m64n64s4wsr m64n64s4wsrx8 m64n64s4wsrx16 $C >> $OUT/spread.txt 2>&1
echo "mxfp8 rc=$?" >> $OUT/spread.txt
grep "^|\|rc=\|Error" $OUT/spread.txt
