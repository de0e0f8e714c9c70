# call 8 of stop 44: the read-back ring A/B in one call: the tree before it (8cb86a9, copied to .device/prering)
# and after, alternating, the 4120 at batch 8 (a photo a run; and batch programs once each)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_BATCH=8 FACERUN_PHOTO_ITEMS=off
for round in 1 2; do
  row $PWD/.device/prering before-r$round photos /tmp/p20 --paths gpu
  row $PWD after-r$round photos /tmp/p20 --paths gpu
done
export FACERUN_PHOTO_ITEMS=on
row $PWD/.device/prering before-items photos /tmp/p20 --paths gpu
row $PWD after-items photos /tmp/p20 --paths gpu
