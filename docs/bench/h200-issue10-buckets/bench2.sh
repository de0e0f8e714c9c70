# call 3: buckets 256, 128 and 32 in turn, OpenCV after each round; bucket 256 on the 4120 photos
source docs/bench/h200-issue10-buckets/common.sh
for round in 1 2 3; do
  for b in 256 128 32; do FACERUN_PHOTO_BUCKET=$b row b$b-$round --photos $P --paths gpu; done
  row cv-$round --photos $P --paths opencv
done
FACERUN_PHOTO_BUCKET=256 row b256-p20 --photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BUCKET=256 row b256-p20x4 --photos /tmp/p20 --paths gpu-processes --processes 4
