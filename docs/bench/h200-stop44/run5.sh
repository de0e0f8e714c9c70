# call 5 of stop 44: the library run's decoding threads (--workers) against the lock they share with the feeding
# thread: 4120 photos, batch 8 a photo a run (the default batching) at 2, 4, 8 (the default) and 12 threads, batch
# programs at 4, and decoding in processes with a photo a run
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_BATCH=8 FACERUN_PHOTO_ITEMS=off
for w in 8 2 4 12 8; do
  row $PWD p4120-b8-off-w$w photos /tmp/p20 --paths gpu --workers $w
done
FACERUN_PHOTO_ITEMS=on row $PWD p4120-b8-on-w4 photos /tmp/p20 --paths gpu --workers 4
row $PWD p4120-b8-off-dp photos /tmp/p20 --paths gpu-decoder-processes
