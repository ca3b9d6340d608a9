# Session 27: the decode warpgroup taking k tiles two at a time (`KernelConfig.pairs`, name
# suffix `p`; `docs/wip/s27-pairs.patch`), against the narrow default, GEMM alone in the
# layer's grid, DeepSeek (the register path: K = 7168 and 2048), every live row compared
# bit for bit with the first variant.
#   git apply docs/wip/s27-pairs.patch
#   run(command="bash docs/wip/gpu_pairs.sh", carry=[".whl"], timeout_s=600)
# Phase 1 compiles every variant in three processes at once (the DSL's disk cache), phase 2
# times them one format at a time.
source docs/wip/device_env.sh || exit 1
X="python3 docs/wip/exp_decode_depth.py --layer-mcap"
F4="m64n64s4wsrh m64n64s4wsrhp m64n64s4wsrhpb4 m64n64s4wsrhb4"
F8="m64n64s4wsrh m64n64s4wsrhp m64n64s3wsrhpb4"
N4="m64n64s4wsrh m64n64s4wsrhp m64n64s4wsrhpb4"
precompile "--weights mxfp4 --configs $F4" "--weights mxfp8 --configs $F8" \
  "--weights nvfp4 --configs $N4"
C="skewed:1 skewed:16 uniform:1 uniform:16 uniform:64"
$X --weights mxfp4 --configs $F4 --cases $C uniform:256 2>&1 | tee $OUT/pairs-mxfp4.txt
$X --weights nvfp4 --configs $N4 --cases $C 2>&1 | tee $OUT/pairs-nvfp4.txt
$X --weights mxfp8 --configs $F8 --cases $C 2>&1 | tee $OUT/pairs-mxfp8.txt
