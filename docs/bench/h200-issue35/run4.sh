# issue 35's photos row before (d2db377, .device/base) and after (the working tree), alternating, three rounds
source docs/bench/h200-issue35/setup.sh
for tree in $PWD/.device/base $PWD; do PYTHONPATH=/tmp/site:$tree python3 -P -c "import facerun, os; print('tree', facerun.__file__, 'runner.py' in os.listdir(os.path.dirname(facerun.__file__)))"; done
nvidia-smi --query-gpu=name --format=csv,noheader
for round in 1 2 3; do
  for tree in $PWD/.device/base $PWD; do
    t=$([ $tree = $PWD ] && echo after || echo before)
    row $tree $t-206-$round --photos $P --paths gpu
  done
done
for tree in $PWD/.device/base $PWD; do
  t=$([ $tree = $PWD ] && echo after || echo before)
  row $tree $t-4120 --photos /tmp/p20 --paths gpu
done
row $PWD floor-206 photos $P --paths decode,decode-processes,gpu
