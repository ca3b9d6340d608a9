# Sourced first by the docs/wip device scripts (run from the repository root on the device
# machine): the packed CuTe DSL (.whl/prelude.sh, carried with carry=[".whl"]), the DSL's
# compile cache, the CI hypothesis profile, and python3 as the harness's interpreter.
source .whl/prelude.sh || return 1
export CUTE_DSL_CACHE_DIR=/tmp/cc MEGAMOE_HYPOTHESIS_PROFILE=ci MEGAMOE_PYTHON=python3
mkdir -p /tmp/cc
