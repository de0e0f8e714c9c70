# call 2 of stop 46: photos copied by the decoding threads into mapped upload buffers (the working tree) against
# stop 45 as landed (.device/head = 517bffd) and the same tree with staging off, alternating, 4120 photos
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
export FACERUN_PHOTO_BATCH=8
for round in 1 2; do
  row $PWD/.device/head head-b8-$round photos /tmp/p20 --paths gpu
  row $PWD mapped-b8-$round photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_STAGING_MB=0 row $PWD unstaged-b8-$round photos /tmp/p20 --paths gpu
done
export FACERUN_PHOTO_BATCH=1
row $PWD/.device/head head-b1 photos /tmp/p20 --paths gpu
row $PWD mapped-b1 photos /tmp/p20 --paths gpu
row $PWD/.device/head head-b1-206 photos $P --paths gpu
row $PWD mapped-b1-206 photos $P --paths gpu
FACERUN_PHOTO_BATCH=8 row $PWD mapped-b8-procs photos /tmp/p20 --paths gpu-decoder-processes
