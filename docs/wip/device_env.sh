# Sourced first by the docs/wip device scripts (run from the repository root on the device
# machine): the packed CuTe DSL (.whl/prelude.sh, carried with carry=[".whl"]), the DSL's
# compile cache, the CI hypothesis profile, python3 as the harness's interpreter, and
# `precompile` and `in_tree` (below).
source .whl/prelude.sh || return 1
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
# precompile "ARGS" ...: compile MX GEMM variants into the DSL's disk cache before timing
# them, one exp_decode_depth.py process per argument string (its --weights, --shape and
# --configs), all at once; prints any error.
precompile() {
  local i=0 a
  for a in "$@"; do
    python3 docs/wip/exp_decode_depth.py --layer-mcap $a --cases skewed:1 \
      > /tmp/precompile-$i.txt 2>&1 &
    i=$((i + 1))
  done
  wait
  grep -h "Error" /tmp/precompile-*.txt
}
# in_tree TREE CMD ...: run CMD in tree TREE of an A/B call (A: this checkout; B: the patched
# copy in /tmp/B) with that tree's own DSL cache (/tmp/ccA, /tmp/ccB), so the two trees never
# share a compiled kernel (the cache key does not see the source).
in_tree() {
  local t=$1 d=$PWD
  shift
  [ "$t" = B ] && d=/tmp/B
  (cd "$d" && CUTE_DSL_CACHE_DIR=/tmp/cc$t "$@")
}
