# Session 21's pipeline-depth question for the other block-scaled formats (runs on main as
# is: exp_decode_depth.py adds the deeper variants for its own process only):
#   run(command="bash docs/wip/gpu_depth_formats.sh", carry=[".whl"], timeout_s=300)
# MXFP8: the layer is slower than torch at skewed T <= 16 (docs/perf.md "Session 21", item
# 5) on m64n64s3ws; NVFP4: slower at uniform T = 16 to 1024 on the 128-row n64s3, and its
# 64-row m64n64s2ws has only two stages. The first variant of each list is the bitwise
# reference (a compiled one); the default of each format is in the list.
# Shared memory per CTA (KiB; CTAs per SM), from s21-mx-depth.patch's mx_storage/ctas_per_sm:
#   MXFP8 K = 7168: s3 75 (3), s4 87, s5 99, s6 111 (2);  K = 2048: s3 65 (3), s4 77 (2)
#   NVFP4 K = 7168: s2 73 (3), s3 83, s4 93, s6 113 (2);  K = 2048: s2 53 (4), s3 63, s4 73 (3)
source .whl/prelude.sh
export CUTE_DSL_CACHE_DIR=/tmp/cc PYTHONPATH=.:$PYTHONPATH
mkdir -p /tmp/cc
C="--cases skewed:1 skewed:16 uniform:1 uniform:16 uniform:64"
timeout 140 python3 docs/wip/exp_decode_depth.py --weights mxfp8 $C \
  --configs m64n64s3ws m64n64s4ws m64n64s5ws m64n64s6ws n64s3 2>&1 | grep "^|\|Error" > $OUT/depth-formats.txt
timeout 140 python3 docs/wip/exp_decode_depth.py --weights nvfp4 $C \
  --configs m64n64s2ws m64n64s3ws m64n64s4ws m64n64s6ws n64s3 2>&1 | grep "^|\|Error" >> $OUT/depth-formats.txt
cat $OUT/depth-formats.txt
