# call 1: landed main before this stop (.device/base, d2db377) against the working tree, alternating, `bench models` and
# `bench --photos` (the 206 shared photos); old spellings, which both trees take
source docs/bench/h200-issue35/setup.sh
for tree in $PWD/.device/base $PWD; do PYTHONPATH=/tmp/site:$tree python3 -P -c "import facerun, os; print('tree', facerun.__file__, 'runner.py' in os.listdir(os.path.dirname(facerun.__file__)))"; done
for round in 1 2; do
  for tree in $PWD/.device/base $PWD; do
    t=$([ $tree = $PWD ] && echo after || echo before)
    row $tree $t-models-$round yunet-2023mar mobilefacenet sface-arch --sizes 640x640 --batch 16 --paths gpu,gpu-photo,gpu-batch
    row $tree $t-photos-$round --photos $P --paths gpu
  done
done
tar czf $OUT/call1.tgz -C /tmp json && rm -rf /tmp/json
