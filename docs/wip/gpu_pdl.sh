# Session 30: the whole layer with programmatic dependent launch on and off
# (docs/wip/exp_pdl_layer.py; MEGAMOE_PDL is read at import, so one process per arm):
# both arms compiled in parallel first, then timed ABAB, one process at a time, and every
# output compared bit for bit between the arms; the PDL arm also counts the captured graph's
# edge types (--probe).
#   run(command="bash docs/wip/gpu_pdl.sh", carry=[".whl"], timeout_s=600)
# $OUT gets pdl.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
E=docs/wip/exp_pdl_layer.py
MEGAMOE_PDL=0 timeout 200 python3 $E --compile-only > /tmp/c0.txt 2>&1 &
MEGAMOE_PDL=1 timeout 200 python3 $E --compile-only --probe > /tmp/c1.txt 2>&1 &
wait
grep -h "probe\|Error\|error" /tmp/c0.txt /tmp/c1.txt | head -40 > $OUT/pdl.txt
echo "compile done $(( $(date +%s) - t0 )) s" >> $OUT/pdl.txt
for i in 1 2; do
  for arm in 0 1; do
    MEGAMOE_PDL=$arm timeout 130 python3 $E --save /tmp/out-$arm.pt 2>&1 \
      | grep "^|\|Error" >> $OUT/pdl.txt
    echo "arm $arm round $i done $(( $(date +%s) - t0 )) s" >> $OUT/pdl.txt
  done
done
python3 $E --compare /tmp/out-0.pt /tmp/out-1.pt >> $OUT/pdl.txt 2>&1
echo "all done $(( $(date +%s) - t0 )) s" >> $OUT/pdl.txt
cat $OUT/pdl.txt
