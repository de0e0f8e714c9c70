# Stop 55's second call (issue 36): a library run's batches of one bucket in batch programs (FACERUN_PHOTO_ITEMS=on,
# now with their padding skipped and the candidate rows chosen in 3 dispatches a batch) against a program run a photo
# (the default), rounds in turn, detect on the 4120 photos and the whole job once; and the same with headers read
# 128 ahead (fuller batches). Then decoding alone, the floor.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s55
E="--embedder MobileFaceNet"
for i in 1 2; do
  row $N d4120-photo-$i photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_ITEMS=on row $N d4120-items-$i photos /tmp/p20 --paths gpu
done
FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_LOOKAHEAD=128 row $N d4120-items-ahead128 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_BATCH=16 row $N d4120-items-b16 photos /tmp/p20 --paths gpu
row $N w4120-photo photos /tmp/p20 --paths gpu $E
FACERUN_PHOTO_ITEMS=on row $N w4120-items photos /tmp/p20 --paths gpu $E
row $N floor photos /tmp/p20 --paths decode,decode-processes
# where the feeding thread's time goes in the 4120-photo detect, native frames too (wgpu-native's submit, finish)
/tmp/site/bin/py-spy record -r 500 --idle --native -f raw -o /tmp/lib.txt -- \
  env PYTHONPATH=/tmp/site:$N FACERUN_CACHE=/tmp/cache-s55 python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench photos /tmp/p20 --paths gpu \
  --json > /tmp/json/lib.json 2> /tmp/json/lib.err
python3 docs/bench/h200-issue35/rows.py lib /tmp/json/lib.json
python3 docs/bench/h200-stop53/stacks.py /tmp/lib.txt _pipelined 45
gzip -c /tmp/lib.txt > $OUT/lib-spy.txt.gz
