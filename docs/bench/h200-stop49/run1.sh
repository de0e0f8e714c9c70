# call 1 of stop 49. Trees: .device/cur = 3e44c6b (stop 48 as landed), .device/emb = this stop's embedding thread.
# A library batch run once in its bucket's batch program (FACERUN_PHOTO_ITEMS=on) against once a photo (the
# default), now that a photo's candidate rows come back instead of its heads; the whole job with the faces embedded
# on a thread of their own, and in batch programs; more photos held while batches fill (FACERUN_PHOTO_HELD=64);
# the floor; issue 37's YuNet rows from photos' bytes (gpu-photo-batch) in batch programs and photo by photo; where
# the whole job's threads wait (py-spy --idle)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
E=$PWD/.device/emb
for round in 1 2; do
  row $C cur-$round photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_ITEMS=on row $C items-$round photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_HELD=64 row $E held64-$round photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_HELD=64 FACERUN_PHOTO_ITEMS=on row $E held64-items-$round photos /tmp/p20 --paths gpu
  row $C s48-embed-$round photos /tmp/p20 --paths gpu --embedder MobileFaceNet
  row $E thread-embed-$round photos /tmp/p20 --paths gpu --embedder MobileFaceNet
  FACERUN_PHOTO_HELD=64 FACERUN_PHOTO_ITEMS=on row $E held64-items-thread-embed-$round photos /tmp/p20 --paths gpu --embedder MobileFaceNet
  [ $round = 1 ] && row $C floor photos /tmp/p20 --paths decode-processes
done
FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_BATCH=16 row $C items16 photos /tmp/p20 --paths gpu
for items in off on; do
  FACERUN_PHOTO_ITEMS=$items row $C y640-$items models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo,gpu-photo-batch,gpu-batch --roofline
  FACERUN_PHOTO_ITEMS=$items row $C sizes-$items models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo,gpu-photo-batch,gpu-batch --roofline
done
PYTHONPATH=/tmp/site:$E FACERUN_CACHE=/tmp/cache-emb /tmp/site/bin/py-spy record --idle --threads \
  --nonblocking -r 100 --format raw -o $OUT/embed-idle.txt -- python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench photos /tmp/p20 --paths gpu \
  --embedder MobileFaceNet --json > /tmp/json/spy.json 2> /tmp/json/spy.err || tail -5 /tmp/json/spy.err
python3 docs/bench/h200-issue35/rows.py spy /tmp/json/spy.json
python3 benchmarks/gil_share.py $OUT/embed-idle.txt --rate 100 --photos 4120 --top 14 | grep -v "(cli.py)\|bench/photo\|commands/bench"
tar czf $OUT/json.tgz -C /tmp json
