# For the session after 33: every column of docs/perf.md "Where the layer stands" on main's
# kernels in one call, so the tables come from one kernel digest (session 33 left every
# T >= 1024 cell, and gpt-oss mxfp8 T = 256, on sessions 25-29's kernels). A whole column
# (14 cases) took 50-70 s warm in session 26 (gpu_layer_rerun.sh), so the six runs (the
# bf16 columns are their bf16 arms) need about 6-7 minutes. Each run goes into
# $OUT/runs.tar as it finishes (a call returns at most 8 files); a run that would start
# past the deadline is skipped and named. With the time
# left, two probes of what session 33 left unexplained, each the layer by stage with
# programmatic dependent launch on and off (MEGAMOE_PDL, read at import):
#   - mxfp8 DeepSeek uniform T = 1: its GEMV took 12-18 % longer in the layer than alone
#     ("Session 33" item 1), here with the GEMM alone again in the same call;
#   - fp8_mxfp4 gpt-oss one expert T = 256: 110.4 us against session 26's 101.9 (item 3).
#   run(command="bash docs/wip/gpu_standing_full.sh", carry=[".whl"], timeout_s=600)
# Then, on the host: tar xf runs.tar, gzip each layer-*.json into docs/perf/session<N>/ and
#   python -m devtools.standing docs/perf/session<N>/layer-*.json.gz
# pasted into the section, with its command (tests/host/test_perf_standing.py checks them).
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
deadline=${MEGAMOE_DEADLINE:-585}
left() { echo $(( deadline - ($(date +%s) - t0) )); }
O="--cache warm --no-control --pairs 3 --rounds 2 --no-plots"
for job in layer-fp8-mxfp4:deepseek layer-fp8-mxfp4:gptoss layer-nvfp4:deepseek \
           layer-nvfp4:gptoss layer-mxfp8:gptoss layer-mxfp8:deepseek; do
  s=${job%%:*}; m=${job##*:}
  [ "$(left)" -lt 100 ] && { echo "skipped $s $m: $(left) s left"; continue; }
  timeout $(( $(left) - 60 )) python3 -m megamoe.bench $s $O --case "$m-*" \
    --output-dir /tmp/runs/$s-$m > /tmp/runs-$s-$m.log 2>&1
  echo "$s $m rc=$? at $(( $(date +%s) - t0 )) s"
  grep -h "torch-grouped\|Error" /tmp/runs-$s-$m.log | tail -n 14
  tar -rf "$OUT/runs.tar" -C /tmp/runs "$s-$m" 2>/dev/null
done
S="from megamoe.bench.layer_stages import main; import sys; main(sys.argv[1:])"
probe() {  # probe RECIPE SHAPE TOKENS ROUTES: the layer by stage, PDL on and off
  local pdl
  for pdl in 1 0; do
    [ "$(left)" -lt 30 ] && { echo "skipped probe $*: $(left) s left"; return; }
    MEGAMOE_PDL=$pdl timeout $(( $(left) - 5 )) python3 -c "$S" --recipe "$1" --shape "$2" \
      --tokens "$3" --routes "$4" --calls 5 --samples 7 --output-dir "/tmp/p-$1-$2-$pdl" \
      > /dev/null 2>&1
    { echo "## $1 $2 T$3 $4, MEGAMOE_PDL=$pdl"; cat "/tmp/p-$1-$2-$pdl/layer_stages.md"
    } >> "$OUT/probes.txt"
  done
}
probe mxfp8 deepseek 1 uniform
# the same GEMMs alone in the same call (session 32 had them in another): the GEMV and the
# wgmma narrow default on random MXFP8 weights, the layer's grid for the capacity
if [ "$(left)" -gt 40 ]; then
  { echo "## mxfp8 DeepSeek uniform T1, the GEMM alone (FC1 / FC2 us)"
    timeout $(( $(left) - 5 )) python3 docs/wip/exp_decode_depth.py --layer-mcap \
      --weights mxfp8 --shape deepseek --configs n16gemv4 m64n64s4wsrh --cases uniform:1 \
      2>&1 | grep "^|\|Error"
  } >> "$OUT/probes.txt"
fi
probe fp8_mxfp4 gptoss 256 skewed
cat "$OUT/probes.txt" 2>/dev/null
