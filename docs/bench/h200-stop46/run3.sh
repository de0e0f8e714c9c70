# call 3 of stop 46: the library run's defaults, stop 45 as landed (.device/head = 517bffd: batch 1) against the
# working tree (batch 8 by default; photos staged; recording with the lock held; a staged photo run alone now copied
# in the run's own submission), and the working tree at batch 1; 4120 and 206 photos, alternating; policy: the
# working tree with the oldest photo not done only submitted, not waited for (.device/policy)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
unset FACERUN_PHOTO_BATCH
for round in 1 2; do
  row $PWD/.device/head head-$round photos /tmp/p20 --paths gpu
  row $PWD new-$round photos /tmp/p20 --paths gpu
done
row $PWD/.device/policy policy-1 photos /tmp/p20 --paths gpu
row $PWD/.device/policy policy-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BATCH=1 row $PWD new-b1 photos /tmp/p20 --paths gpu
row $PWD/.device/head head-206 photos $P --paths gpu
row $PWD new-206 photos $P --paths gpu
FACERUN_PHOTO_BATCH=1 row $PWD new-b1-206 photos $P --paths gpu
row $PWD floor photos /tmp/p20 --paths decode,decode-processes
