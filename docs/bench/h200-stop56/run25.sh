# Stop 56's first call (issues 36 and 37), for the next session that gets a device (none was lent in stop 56):
# Trees: .device/s55 = 3d355d4, .device/s56p = 451faad (hurry, no pools), .device/s56 = 07bbb15 (both).
# 1. stop 55's native encoders against the tree before them (.device/s55 = 3d355d4), detect on the 4120 photos ABBA;
# 2. stop 56's library-run change: a photo the output order waits for is hurried (its batch submitted, read back
#    with the next), not forced (FACERUN_PHOTO_HURRY=0: as before), in turn on the new tree (.device/s56);
# 3. YuNet with its 2x2 max pools folded into the 1x1s after them (40 dispatches) against 44 (.device/s56p, the tree
#    before that commit): batch 16 and a photo at 640x640, batch 8 at 1024x704 and 1280x736;
# 4. the whole job and batch programs on the new tree; then a profile of the feeding thread (native frames).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
O=$PWD/.device/s55
P=$PWD/.device/s56p
N=$PWD/.device/s56
E="--embedder MobileFaceNet"
row $O d4120-before-1 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_HURRY=0 row $N d4120-forced-1 photos /tmp/p20 --paths gpu
row $N d4120-hurried-1 photos /tmp/p20 --paths gpu
row $N d4120-hurried-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_HURRY=0 row $N d4120-forced-2 photos /tmp/p20 --paths gpu
row $O d4120-before-2 photos /tmp/p20 --paths gpu
for t in $P $N $P $N; do
  row $t b16-$(basename $t) models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch,gpu-photo --repeat 30
done
for t in $P $N; do
  FACERUN_PHOTO_ITEMS=on row $t b8-$(basename $t) models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 \
    --paths gpu-photo-batch --repeat 30
done
row $N w4120-hurried photos /tmp/p20 --paths gpu $E
FACERUN_PHOTO_HURRY=0 row $N w4120-forced photos /tmp/p20 --paths gpu $E
FACERUN_PHOTO_ITEMS=on row $N d4120-items photos /tmp/p20 --paths gpu
profile $N
