# A FlashInfer sm90 MegaMoE backend through our contract tests on the GPU machine; brings back
# its JUnit report, its log and its conformance table (README "Check your kernel"):
#   pip download flashinfer-python==0.7.2.post1 --no-deps -d /tmp/fi
#   python -m devtools.flashinfer_slim /tmp/fi/flashinfer_python-0.7.2.post1-py3-none-any.whl .flashinfer
#   pip download (the device README's platform flags) -d .whl-fi "apache-tvm-ffi>=0.1.11,<0.2"
#   run(command="bash devtools/flashinfer_device.sh flashinfer-sm90-cake",
#       carry=[".whl", ".whl-fi", ".flashinfer"], timeout_s=600)
# The cake is CUDA C++ that FlashInfer's JIT builds with the machine's nvcc (sm_90a) and
# tvm-ffi; our CuTe DSL (.whl) serves the harness. flashinfer-sm90-fp8-pull is CuTe DSL code
# that needs a CuTe DSL of 4.6.2 or newer (flashinfer-python 0.7.2.post1 declares it; on 4.5.2
# its kernels did not compile, 2026-12-05), which cannot share a process with ours. Packed by
# `python -m devtools.pack_device_wheels --fi-dsl` (4.7.1 with its CUDA 13 compiler, about
# 62 MiB as xz) in two parts, it takes three calls back to back (a warm machine keeps /tmp
# about 30 s):
#   run(command="bash devtools/flashinfer_device.sh stage-dsl", carry=[".whl-fidsl-1"])
#   run(command="bash devtools/flashinfer_device.sh stage-dsl", carry=[".whl-fidsl-2"])
#   run(command="bash devtools/flashinfer_device.sh flashinfer-sm90-fp8-pull",
#       carry=[".whl-fi", ".flashinfer"], timeout_s=600)
# The contract tests of a FlashInfer backend import no CuTe DSL of ours, so the FP8 pull's
# call runs them on FlashInfer's DSL alone (the adapter runs one rank in FlashInfer's single-rank mode,
# MEGA_NO_DIST=1: no nvshmem4py needed). Its "bench" runs layer_flashinfer_fp8: our arm on
# .whl (carry it too), FlashInfer's worker on the staged DSL ($MEGAMOE_FLASHINFER_DSL_PATH).
# With "bench [CASE_GLOB]" after the backend name the call runs the side-by-side benchmark
# instead of the contract tests (layer_flashinfer_cake --quick, FlashInfer in a worker
# process; CASE_GLOB default 'dsrank-*-T16': one rank's share of the DeepSeek-like layer, small
# cases first; the whole layer's 'deepseek-*' cases are the tight ones in memory, docs/perf.md)
# and brings back its JSON
# record and log:
#   run(command="bash devtools/flashinfer_device.sh flashinfer-sm90-cake bench", ...)
# (begin the command with `export MEGAMOE_GIT_COMMIT=<the commit>;` so that the record names it:
# the GPU machine's copy has a stale .git, devtools/README.md)
# FlashInfer's JIT cache (the cake's build took about 145 s on the H200) lives under
# $FLASHINFER_WORKSPACE_BASE (/tmp/fiws) and comes back as $OUT/fi-jit-cache.tgz; copy it to
# .fi-jit/cache.tgz (git-ignored) and add ".fi-jit" to carry: the next call unpacks it with
# its files' times and dates what it installs again back (devtools/jit_cache.py). With .flashinfer
# packed (about 1 MiB) a cake call carrying .whl (40 MiB), .whl-fi (3 MiB), .flashinfer and
# .fi-jit (about 7 MiB) is about 51 MiB before the tree (about 10 MiB tracked, 2026-12-05),
# inside the 64 MiB a call takes; unpacked (11.6 MiB) it was over.
# Run on an H200 on 2026-12-06 (docs/conformance.md, docs/perf.md "Side by side with
# FlashInfer"): the two stage-dsl calls (5 and 6 s), the FP8 pull's contract tests (34 s) and
# its probe (devtools/flashinfer_fp8_probe.py) in one call of 82 s; the cake's contract tests
# (244 s with the JIT build); the cake's benchmark at 'deepseek-uniform-*' (112 s, the JIT
# cache still on the machine). Earlier, on an H100 (2026-12-05): the cake's tests and its
# benchmark at 'dsrank-uniform-T16'. On an H100 (2026-12-06), the carried cache dated as
# below: the cake's clamp test alone in a call of 22 s (no build); the FP8 pull's tests and
# its --survey in one of 53 s. The whole layer's 'deepseek-skewed-*' ran out of memory there:
# FlashInfer's worker asked 14 GiB while our process held 64 GiB, the A/A control's two
# layers kept in torch's cache (the runner released it before dropping them; fixed in
# megamoe/bench/runner.py the same day, tests/host/test_bench_memory.py). Not run since.
set -u
backend=${1:?usage: bash devtools/flashinfer_device.sh stage-dsl | flashinfer-sm90-cake|flashinfer-sm90-fp8-pull [bench [CASE_GLOB]]}
FIDSL=${MEGAMOE_FI_DSL_SITE:-/tmp/fidsl}
source "$(dirname "$0")/gpu_lock.sh"  # one device script at a time (exit 3 beside another)
source "$(dirname "$0")/unpack.sh"
# the wheel's nvidia_cutlass_dsl_packages.pth adds dsl_packages; a PYTHONPATH entry runs no .pth
FIDSL_PATH=$FIDSL:$FIDSL/nvidia_cutlass_dsl/dsl_packages
if [ "$backend" = stage-dsl ]; then
  # each call unpacks the part it carries (.whl-fidsl-<i>/site.tar.xz, "<i> <n>" in its part
  # file) into $FIDSL.part; part 1 starts afresh; with all n in, $FIDSL.part becomes $FIDSL
  found=
  for dir in .whl-fidsl-*; do
    [ -f "$dir/site.tar.xz" ] && [ -f "$dir/part" ] || continue
    read -r i n < "$dir/part"
    if [ "$i" = 1 ]; then rm -rf "$FIDSL.part" "$FIDSL"; fi
    unpack "$dir/site.tar.xz" "$FIDSL.part" && touch "$FIDSL.part/.megamoe-part-$i-of-$n" \
      || { echo "cannot unpack $dir/site.tar.xz"; exit 1; }
    found=$n
  done
  [ -n "$found" ] || { echo "stage-dsl: carry .whl-fidsl-1, then .whl-fidsl-2 in the next call (python -m devtools.pack_device_wheels --fi-dsl)"; exit 2; }
  have=$(find "$FIDSL.part" -maxdepth 1 -name ".megamoe-part-*-of-$found" | wc -l)
  if [ "$have" -lt "$found" ]; then
    echo "staged $have of $found parts of the CuTe DSL: carry the next part in the next call"
    exit 0
  fi
  rm -rf "$FIDSL" && mv "$FIDSL.part" "$FIDSL" || { echo "cannot move $FIDSL.part to $FIDSL"; exit 1; }
  PYTHONPATH=$FIDSL_PATH python3 -c "from importlib.metadata import version; print('staged nvidia-cutlass-dsl', version('nvidia-cutlass-dsl'))"
  exit $?
fi
if [ "$backend" = flashinfer-sm90-fp8-pull ]; then
  [ -d "$FIDSL/nvidia_cutlass_dsl" ] || { echo "no CuTe DSL for FlashInfer at $FIDSL: run 'bash devtools/flashinfer_device.sh stage-dsl' with .whl-fidsl-1, then with .whl-fidsl-2, in the calls just before this one"; exit 3; }
fi
if [ "$backend" = flashinfer-sm90-fp8-pull ] && [ "${2:-}" != bench ]; then
  # the contract tests import no CuTe DSL of ours: FlashInfer's alone, no .whl
  export PYTHONPATH=$FIDSL_PATH:$PWD${PYTHONPATH:+:$PYTHONPATH} CUTE_DSL_ARCH=sm_90a \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
else
  source .whl/prelude.sh || { echo "prelude failed"; exit 1; }
fi
export MEGAMOE_FLASHINFER_DSL_PATH=$FIDSL_PATH
FI_SITE=${MEGAMOE_FI_SITE:-/tmp/fisite}
python3 -m pip install -q --no-index --no-deps --no-compile --target "$FI_SITE" .whl-fi/*.whl \
  || { echo "cannot install .whl-fi"; exit 1; }
# FlashInfer's files travel packed (devtools/flashinfer_slim.py: 1.0 MiB against 11.6 unpacked)
FI_ROOT=${MEGAMOE_FI_ROOT:-/tmp/fi-root}
[ -f .flashinfer/flashinfer.tar.xz ] || { echo "no .flashinfer/flashinfer.tar.xz: python -m devtools.flashinfer_slim WHEEL .flashinfer, and carry .flashinfer"; exit 2; }
rm -rf "$FI_ROOT" && unpack .flashinfer/flashinfer.tar.xz "$FI_ROOT" \
  || { echo "cannot unpack .flashinfer/flashinfer.tar.xz"; exit 1; }
export PYTHONPATH=${PYTHONPATH:-}:$FI_SITE MEGAMOE_FLASHINFER_ROOT=$FI_ROOT \
  MEGAMOE_PYTHON=python3 CUTE_DSL_CACHE_DIR=/tmp/cc \
  FLASHINFER_WORKSPACE_BASE=${MEGAMOE_FI_WORKSPACE:-/tmp/fiws}
mkdir -p "$FLASHINFER_WORKSPACE_BASE"
# The carried cache keeps its files' times (tar); what was installed again above (the tvm-ffi
# headers, FlashInfer's sources) is dated 2020-01-01, older than every carried build
# (devtools/jit_cache.py: with the headers written now, or the cache touched at the unpack as
# before, ninja rebuilt sm90_push_a2a and two more on the H100 on 2026-12-06, over 150 s).
python3 -m devtools.jit_cache date-back "$FI_SITE" "$FI_ROOT" \
  || echo "cannot date the installed packages back: the JIT may build from scratch"
if [ -f .fi-jit/cache.tgz ]; then
  tar xzf .fi-jit/cache.tgz -C "$FLASHINFER_WORKSPACE_BASE" \
    || echo "cannot unpack .fi-jit/cache.tgz: the JIT builds from scratch"
fi
bring_back_jit_cache() {
  if [ -d "$FLASHINFER_WORKSPACE_BASE/.cache" ]; then
    tar czf "$OUT/fi-jit-cache.tgz" -C "$FLASHINFER_WORKSPACE_BASE" .cache
  fi
}
trap bring_back_jit_cache EXIT
if [ "${2:-}" = bench ]; then
  case "$backend" in
    flashinfer-sm90-cake) bench=layer_flashinfer_cake ;;
    flashinfer-sm90-fp8-pull) bench=layer_flashinfer_fp8 ;;
    *) echo "bench: only flashinfer-sm90-cake and flashinfer-sm90-fp8-pull have a benchmark"; exit 2 ;;
  esac
  dir=${MEGAMOE_FI_BENCH_DIR:-/tmp/fib}
  timeout -k 10 "${MEGAMOE_FI_BENCH_TIMEOUT:-540}" python3 -m megamoe.bench "$bench" \
    --quick --case "${3:-dsrank-*-T16}" --no-plots --output-dir "$dir" > "$OUT/bench.log" 2>&1
  rc=$?
  cp "$dir/$bench.json" "$OUT/" 2>/dev/null
  tail -n 20 "$OUT/bench.log"
  exit $rc
fi
# MEGAMOE_FI_TESTS_K narrows the contract tests (pytest -k; default all of test_layer_contract).
# bounded twice: FlashInfer's kernels spin on flags, so a hang must end inside the device call
# with the JIT cache still brought back (MEGAMOE_FI_TESTS_TIMEOUT s for the run), and a test
# that hangs must fail alone (MEGAMOE_FI_TEST_TIMEOUT s each, the cake's first test includes
# its JIT build, about 145 s on the H200)
timeout -k 10 "${MEGAMOE_FI_TESTS_TIMEOUT:-530}" ./run_tests.sh single --moe-backend "$backend" \
  -k "${MEGAMOE_FI_TESTS_K:-layer_contract}" -p no:cacheprovider --timeout "${MEGAMOE_FI_TEST_TIMEOUT:-300}" \
  --junitxml="$OUT/$backend.xml" > "$OUT/$backend.log" 2>&1
rc=$?
[ "$rc" = 124 ] && echo "the contract tests ran past ${MEGAMOE_FI_TESTS_TIMEOUT:-530} s: stopped" >> "$OUT/$backend.log"
python3 -m tests.harness.conformance --backend "$backend" "$OUT/$backend.xml" \
  > "$OUT/$backend-conformance.md" 2>&1
tail -n 5 "$OUT/$backend.log"
head -n 40 "$OUT/$backend-conformance.md"
exit $rc
