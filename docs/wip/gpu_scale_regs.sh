# Session 23's device call for the scale bytes in registers (`scale_regs`, branch work kept
# as docs/wip/s23-scale-regs.patch): the GPU tests of the new variants (bitwise against the
# shared-memory twin with per-block random scale bytes, the fallback at K = 8832, and the
# `m64n64s4wsr` cases of the existing MX tests, whose small K take the fallback), then the
# GEMM alone at DeepSeek shapes against the shared-memory variants (exp_decode_depth.py:
# every live row bitwise equal to the first column, then timed).
#   (landed in session 24: runs on main as is; before that: git apply docs/wip/s23-scale-regs.patch)
#   run(command="bash docs/wip/gpu_scale_regs.sh", carry=[".whl"], timeout_s=400)
# About 2 min warm (session 23: 142 s), plus the machine's start. exp_decode_depth.py adds the
# variants the patch does not compile (MXFP4's and MXFP8's s3wsr) for its process.
# $OUT gets tests.txt and time.txt.
source docs/wip/device_env.sh || exit 1
timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/single/test_scale_regs.py \
  tests/single/test_mxfp4_gemm_kernel.py -k "wsr or registers or falls_back" > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/tests.txt; tail -3 $OUT/tests.txt
C="--cases uniform:1 uniform:16 uniform:64 skewed:1 skewed:16"
E="python3 docs/wip/exp_decode_depth.py"
timeout 150 $E --weights mxfp4 --configs m64n64s3ws m64n64s3wsr m64n64s4ws m64n64s4wsr m64n64s6ws $C >> $OUT/time.txt 2>&1
echo "mxfp4 rc=$?" >> $OUT/time.txt
timeout 110 $E --weights nvfp4 --configs m64n64s4ws m64n64s4wsr m64n64s6ws $C >> $OUT/time.txt 2>&1
echo "nvfp4 rc=$?" >> $OUT/time.txt
timeout 100 $E --weights mxfp8 --configs m64n64s3ws m64n64s3wsr m64n64s4wsr $C >> $OUT/time.txt 2>&1
echo "mxfp8 rc=$?" >> $OUT/time.txt
grep -v "^\s*$" $OUT/time.txt | grep "^|\|rc=\|Error" | head -60
