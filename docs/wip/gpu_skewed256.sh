# Session 26: is the first-halves raster's +0.3-0.9 % at one expert T = 256 (sessions 25 and
# 26, one 7-sample set per arm each) real? The DeepSeek fp8_mxfp4 layer by stage at skewed
# T = 256 only, main (m64n64s4wsrh) against the rule without the raster (m64n64s4wsr, via
# with_narrow.py), three interleaved repeats.
#   run(command="bash docs/wip/gpu_skewed256.sh", carry=[".whl"], timeout_s=170)
# $OUT gets stages.txt.
source docs/wip/device_env.sh || exit 1
L="megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 256 --routes skewed --calls 5 --samples 7"
for rep in 1 2 3; do
  timeout 40 python3 -m $L --output-dir /tmp/s-main 2>&1 | grep "^| fp8\|Error" | sed "s/^/h $rep /" >> $OUT/stages.txt
  timeout 40 python3 docs/wip/with_narrow.py mxfp4=m64n64s4wsr:3,m64n64s6ws:2 -- $L --output-dir /tmp/s-r 2>&1 \
    | grep "^| fp8\|Error" | sed "s/^/r $rep /" >> $OUT/stages.txt
done
cat $OUT/stages.txt
