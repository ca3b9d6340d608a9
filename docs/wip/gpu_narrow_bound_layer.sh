# Session 29: the whole DeepSeek layer under the rows-per-expert narrow bound against the
# session-28 rule (8192 routes), at uniform T = 1536 / 2048 and one expert T = 2048, three
# quantized recipes (exp_narrow_bound_layer.py; outputs compared bit for bit).
#   run(command="bash docs/wip/gpu_narrow_bound_layer.sh", carry=[".whl"], timeout_s=480)
# $OUT gets layer.txt.
source docs/wip/device_env.sh || exit 1
t0=$(date +%s)
precompile "--weights mxfp4 --configs m64n64s4wsrhb4 n64s4ws" \
  "--weights mxfp8 --configs m64n64s4wsrh n64s3" \
  "--weights nvfp4 --configs m64n64s4wsrhb4 n64s4wsr" > $OUT/layer.txt
echo "precompile done $(( $(date +%s) - t0 )) s" >> $OUT/layer.txt
for r in nvfp4 fp8_mxfp4 mxfp8; do
  timeout 130 python3 docs/wip/exp_narrow_bound_layer.py --recipes $r 2>&1 \
    | grep "^|\|Error" >> $OUT/layer.txt
  echo "$r done $(( $(date +%s) - t0 )) s" >> $OUT/layer.txt
done
cat $OUT/layer.txt
