# call 7 of stop 44: the defaults to choose: batch 1 against batch 8 (a photo a run, the model's read-back ring),
# 8 decoding threads (the default) against 12, on the 4120 and the 206
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_ITEMS=off
for cfg in "1 8" "8 8" "8 12" "1 12" "8 8"; do
  set -- $cfg; export FACERUN_PHOTO_BATCH=$1
  row $PWD p4120-b$1-w$2 photos /tmp/p20 --paths gpu --workers $2
done
for b in 1 8 1 8; do
  FACERUN_PHOTO_BATCH=$b row $PWD p206-b$b photos $P --paths gpu
done
