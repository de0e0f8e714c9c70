# call 1 of stop 44: a bucket's photos in its batch program of N items (FACERUN_PHOTO_ITEMS=on, one pass, each item
# masked to its own photo) against the bucket's program once a photo in one submission (off) and photo after photo
# (batch 1), on the shared 206 photos and on them 20 times over (4120), beside the decode floor
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_BATCH=1
row $PWD floor-206 photos $P --paths decode,decode-processes
for round in 1 2; do
  for cfg in "1 on" "8 on" "8 off"; do
    set -- $cfg; export FACERUN_PHOTO_BATCH=$1 FACERUN_PHOTO_ITEMS=$2
    row $PWD p206-b$1-$2-r$round photos $P --paths gpu
  done
done
for cfg in "8 on" "1 on" "8 off" "16 on"; do
  set -- $cfg; export FACERUN_PHOTO_BATCH=$1 FACERUN_PHOTO_ITEMS=$2
  row $PWD p4120-b$1-$2 photos /tmp/p20 --paths gpu
done
export FACERUN_PHOTO_BATCH=8 FACERUN_PHOTO_ITEMS=on
row $PWD p4120-b8-on-dp photos /tmp/p20 --paths gpu-decoder-processes
export FACERUN_PHOTO_BATCH=1
row $PWD floor-4120 photos /tmp/p20 --paths decode,decode-processes
