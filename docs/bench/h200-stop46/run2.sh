# call 2 of stop 46, 4120 photos, alternating: stop 45 as landed (.device/head = 517bffd) against the working tree
# (photos copied by the decoding threads into mapped upload buffers; recording calls through ctypes holding the
# interpreter lock), and the working tree with each of the two off (FACERUN_GPU_REPLAY=native: cffi, the lock let go
# at every call; FACERUN_PHOTO_STAGING_MB=0: no staging)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
export FACERUN_PHOTO_BATCH=8
for round in 1 2; do
  row $PWD/.device/head head-b8-$round photos /tmp/p20 --paths gpu
  row $PWD new-b8-$round photos /tmp/p20 --paths gpu
done
FACERUN_GPU_REPLAY=native row $PWD cffi-b8 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_STAGING_MB=0 row $PWD unstaged-b8 photos /tmp/p20 --paths gpu
export FACERUN_PHOTO_BATCH=1
row $PWD/.device/head head-b1 photos /tmp/p20 --paths gpu
row $PWD new-b1 photos /tmp/p20 --paths gpu
row $PWD/.device/head head-b1-206 photos $P --paths gpu
row $PWD new-b1-206 photos $P --paths gpu
FACERUN_PHOTO_BATCH=8 row $PWD new-b8-procs photos /tmp/p20 --paths gpu-decoder-processes
