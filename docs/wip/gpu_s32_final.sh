# Session 32, the call after the `single` qualification, on the warm machine: the four
# sanitizers (devtools/device_qualify.sh sanitize), then with the time left the paired layer
# benchmark against PyTorch at T <= 16 (the cases the GEMVs changed: fp8_mxfp4 and nvfp4 at
# capacities <= 32, mxfp8 at T = 1), one run per recipe and shape, each added to
# $OUT/runs.tar as it finishes (a call returns at most 8 files). The standing tables then
# take these cells first: python -m devtools.standing <these records> <the older ones>.
#   run(command="bash docs/wip/gpu_s32_final.sh", carry=[".whl"], timeout_s=600)
t0=$(date +%s)
bash devtools/device_qualify.sh sanitize; echo "sanitize rc=$? at $(( $(date +%s) - t0 )) s"
source docs/wip/device_env.sh || exit 1
O="--cache warm --no-control --pairs 3 --rounds 2 --no-plots"
for job in layer-fp8-mxfp4:deepseek:"1 4 16" layer-nvfp4:deepseek:"1 4 16" \
           layer-fp8-mxfp4:gptoss:"1 4 16" layer-nvfp4:gptoss:"1 4 16" \
           layer-mxfp8:deepseek:1 layer-mxfp8:gptoss:1; do
  IFS=: read -r s m ts <<< "$job"
  left=$(( ${MEGAMOE_DEADLINE:-585} - ($(date +%s) - t0) ))
  [ $left -lt 40 ] && { echo "skipped $s $m: ${left} s left"; continue; }
  cases=(); for t in $ts; do cases+=(--case "$m-*-T$t"); done
  timeout $(( left - 5 )) python3 -m megamoe.bench $s $O "${cases[@]}" \
    --output-dir /tmp/runs/$s-$m > /tmp/runs-$s-$m.log 2>&1
  echo "$s $m rc=$? at $(( $(date +%s) - t0 )) s"; grep -h "torch-grouped\|Error" /tmp/runs-$s-$m.log | tail -n 8
  tar -rf $OUT/runs.tar -C /tmp/runs $s-$m 2>/dev/null
done
