# call 1 of stop 47, alternating: stop 46 as landed (.device/head = 7313dde) against the working tree (a batch's
# small writes in one queue write; batch programs, FACERUN_PHOTO_ITEMS=on, copying staged photos on the device);
# 4120 and 206 photos at the defaults (batch 8), the batch programs, the whole job with MobileFaceNet, the floor;
# then two batches left running (FACERUN_PHOTO_INFLIGHT=2) against one
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
for round in 1 2; do
  row $PWD/.device/head head-$round photos /tmp/p20 --paths gpu
  row $PWD new-$round photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_ITEMS=on row $PWD items-$round photos /tmp/p20 --paths gpu
done
FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_BATCH=16 row $PWD items-b16 photos /tmp/p20 --paths gpu
row $PWD/.device/head head-206 photos $P --paths gpu
row $PWD new-206 photos $P --paths gpu
FACERUN_PHOTO_ITEMS=on row $PWD items-206 photos $P --paths gpu
row $PWD embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
FACERUN_PHOTO_ITEMS=on row $PWD items-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD floor photos /tmp/p20 --paths decode,decode-processes
FACERUN_PHOTO_INFLIGHT=2 row $PWD inflight2-1 photos /tmp/p20 --paths gpu
row $PWD new-3 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_INFLIGHT=2 row $PWD inflight2-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_INFLIGHT=2 FACERUN_PHOTO_ITEMS=on row $PWD inflight2-items photos /tmp/p20 --paths gpu
