# call 2: bucket 128 (the default) against 32 (a program per padded size, as before), OpenCV beside; 4120 photos; embed
source docs/bench/h200-issue10-buckets/common.sh
for round in 1 2; do
  FACERUN_PHOTO_BUCKET=128 row b128-$round --photos $P --paths gpu
  FACERUN_PHOTO_BUCKET=32 row b32-$round --photos $P --paths gpu
  row cv-$round --photos $P --paths opencv
done
FACERUN_PHOTO_BUCKET=128 row b128-p20 --photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BUCKET=32 row b32-p20 --photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BUCKET=128 row b128-p20x4 --photos /tmp/p20 --paths gpu-processes --processes 4
FACERUN_PHOTO_BUCKET=128 row b128-embed --photos $P --paths cpu,gpu --embed .device/models/MobileFaceNet.onnx
FACERUN_PHOTO_BUCKET=128 row b128-agree --photos $P --paths cpu,gpu
