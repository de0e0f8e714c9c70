# Stop 54's first call (issue 37): YuNet's batch of photos from their bytes, the heads read back whole (the old row)
# against the candidate rows the device chose (as a library run reads them), and a batch submitted to an idle device
# whole against in two halves (FACERUN_PHOTO_SPLIT), in batch programs (FACERUN_PHOTO_ITEMS=on) and once a photo;
# and gpu-photo (a photo at a time, as detect runs it) reading the heads whole against the rows.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s54
B16="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch --repeat 30"
B8="models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo-batch --repeat 30"
for i in 1 2; do
  FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SELECT=off FACERUN_PHOTO_SPLIT=0 row $N heads-whole-$i $B16
  FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SPLIT=0 row $N rows-$i $B16
  FACERUN_PHOTO_ITEMS=on row $N rows-split-$i $B16
done
FACERUN_PHOTO_SPLIT=0 row $N once-a-photo-rows $B16
row $N once-a-photo-rows-split $B16
FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SELECT=off FACERUN_PHOTO_SPLIT=0 row $N b8-heads-whole $B8
FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SPLIT=0 row $N b8-rows $B8
FACERUN_PHOTO_ITEMS=on row $N b8-rows-split $B8
FACERUN_PHOTO_ITEMS=on row $N b8-rows-split-2 $B8
# a photo at a time (gpu-photo, as detect runs it): the heads whole against the candidate rows
for i in 1 2; do
  FACERUN_PHOTO_SELECT=off row $N b1-heads-whole-$i models yunet-2023mar --sizes 640x640 --paths gpu-photo --repeat 60
  row $N b1-rows-$i models yunet-2023mar --sizes 640x640 --paths gpu-photo --repeat 60
done
