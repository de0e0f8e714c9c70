# call 2 of stop 44: the feeding thread on photos of one bucket without decoding (benchmarks/photo_batches.py), then
# the library run again with a batch program reading back only its photos' items
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=/tmp/site:$PWD
python3 benchmarks/photo_batches.py $P --batch 8 --rounds 5 --buckets 1 2>&1 | grep -v Warn
python3 benchmarks/photo_batches.py $P --batch 8 --rounds 5 --buckets 4 2>&1 | grep -v Warn
python3 benchmarks/photo_batches.py $P --batch 16 --rounds 5 --buckets 1 2>&1 | grep -v Warn
for cfg in "8 on" "8 off"; do
  set -- $cfg; export FACERUN_PHOTO_BATCH=$1 FACERUN_PHOTO_ITEMS=$2
  row $PWD p4120-b$1-$2 photos /tmp/p20 --paths gpu
done
