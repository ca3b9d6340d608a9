# Session 30, second call: PDL off, PDL on (every kernel lets its dependents launch right
# after its wait) and PDL on with the GEMMs letting them launch only as their CTAs exit
# (abase/: this tree with `await_inputs(launch_dependents=False)` in the two GEMM kernel
# modules), ABAB-style rounds of one process per arm (docs/wip/exp_pdl_layer.py), every
# output compared bit for bit with the PDL-off arm's.
#   run(command="bash docs/wip/gpu_pdl_late.sh", carry=[".whl"], timeout_s=600)
# $OUT gets pdl-late.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
rm -rf abase && mkdir -p abase/docs/wip && cp -r megamoe fixtures oracle abase/ \
  && cp docs/wip/exp_pdl_layer.py abase/docs/wip/
sed -i 's/^\( *\)await_inputs()$/\1await_inputs(launch_dependents=False)/' \
  abase/megamoe/experts/grouped_gemm_kernel.py abase/megamoe/experts/mxfp4_gemm_kernel.py
grep -c "launch_dependents=False" abase/megamoe/experts/*_kernel.py > $OUT/pdl-late.txt
C="--cases uniform:1 uniform:16 skewed:1 skewed:16"
run_arm() {  # seconds arm-name extra-args...
  local s=$1 arm=$2; shift 2
  case $arm in
    off) MEGAMOE_PDL=0 timeout $s python3 docs/wip/exp_pdl_layer.py $C "$@" ;;
    on) MEGAMOE_PDL=1 timeout $s python3 docs/wip/exp_pdl_layer.py $C "$@" ;;
    late) (cd abase && MEGAMOE_PDL=1 timeout $s python3 docs/wip/exp_pdl_layer.py $C "$@") ;;
  esac
}
for arm in off on late; do
  run_arm 200 $arm --compile-only > /tmp/c-$arm.txt 2>&1 &
done
wait
grep -h "tree\|Error\|error" /tmp/c-*.txt | head -20 >> $OUT/pdl-late.txt
echo "compile done $(( $(date +%s) - t0 )) s" >> $OUT/pdl-late.txt
for i in 1 2; do
  for arm in off on late; do
    run_arm 110 $arm --save /tmp/out-$arm.pt 2>&1 | grep "^|\|Error" \
      | sed "s/^/$arm /" >> $OUT/pdl-late.txt
    echo "$arm round $i done $(( $(date +%s) - t0 )) s" >> $OUT/pdl-late.txt
  done
done
for arm in on late; do
  python3 docs/wip/exp_pdl_layer.py --compare /tmp/out-off.pt /tmp/out-$arm.pt 2>&1 \
    | sed "s/^/off-vs-$arm /" >> $OUT/pdl-late.txt
done
echo "all done $(( $(date +%s) - t0 )) s" >> $OUT/pdl-late.txt
cat $OUT/pdl-late.txt
