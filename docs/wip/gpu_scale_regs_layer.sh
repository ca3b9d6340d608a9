# Session 23: the whole layer by stage with the scale-register rule (MX_NARROW_DEPTHS takes
# m64n64s4wsr for MXFP4 and NVFP4) against a copy of main's code in abase/ (untracked, so it
# travels), with docs/wip/s23-scale-regs.patch applied to the tree:
#   (landed in session 24; to compare a change: make it in the tree, main in abase/ as below)
#   mkdir abase && git archive main megamoe fixtures oracle | tar -x -C abase
# About 110 s warm (session 23: 106 s). Delete abase/ afterwards.
#   run(command="bash docs/wip/gpu_scale_regs_layer.sh", carry=[".whl"], timeout_s=280)
# $OUT gets stages.txt.
source docs/wip/device_env.sh || exit 1
for recipe in fp8_mxfp4 nvfp4; do
  L="python3 -m megamoe.bench.layer_stages --recipe $recipe --tokens 1 16 1024 --routes uniform skewed --calls 5 --samples 7"
  for tree in patch main; do
    d=.; [ $tree = main ] && d=abase
    (cd $d && timeout 60 $L --output-dir /tmp/ls-$recipe-$tree 2>&1) | grep "^| \|Error" | sed "s/^/$recipe $tree /" >> $OUT/stages.txt
  done
done
cat $OUT/stages.txt
