# Session 26 (ran once, after landing m64n64s6wsh / m64n64s3wsh as the narrow fallbacks): the
# gpt-oss layer by stage, main's rule against the session-25 rule put back for one process
# (with_narrow.py: the fallbacks without the raster). The GEMM alone for the same twins ran
# in gpu_s26_check.sh.
#   run(command="bash docs/wip/gpu_halves_gptoss.sh", carry=[".whl"], timeout_s=400)
# $OUT gets stages.txt.
source docs/wip/device_env.sh || exit 1
for recipe in nvfp4 mxfp8; do
  rule="nvfp4=m64n64s4wsrh:3,m64n64s6ws:2"
  [ $recipe = mxfp8 ] && rule="mxfp8=m64n64s4wsrh:3"
  L="megamoe.bench.layer_stages --shape gptoss --recipe $recipe --tokens 1 16 256 --routes uniform skewed --calls 5 --samples 7"
  timeout 90 python3 -m $L --output-dir /tmp/ls-$recipe-main 2>&1 | grep "^| \|Error" | sed "s/^/$recipe main /" >> $OUT/stages.txt
  timeout 90 python3 docs/wip/with_narrow.py $rule -- $L --output-dir /tmp/ls-$recipe-s25 2>&1 | grep "^| \|^#\|Error" | sed "s/^/$recipe s25rule /" >> $OUT/stages.txt
done
cat $OUT/stages.txt
