# Stop 55's third call (issue 36): the runs' command encoders and buffers made, finished, released and submitted by
# wgpu-native's calls with the interpreter lock held, and the programs' parameters written so (run22's profile: a
# quarter of the feeding thread's time was wgpu-py's API calls, mostly waiting to take the lock back), against the
# tree before (.device/s55), in turn: detect on the 4120 photos, the whole job, YuNet's batch of 16 and a photo.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
O=$PWD/.device/s55
N=$PWD/.device/s56
E="--embedder MobileFaceNet"
row $O d4120-before-1 photos /tmp/p20 --paths gpu
row $N d4120-native-1 photos /tmp/p20 --paths gpu
row $N d4120-native-2 photos /tmp/p20 --paths gpu
row $O d4120-before-2 photos /tmp/p20 --paths gpu
for t in $O $N; do
  FACERUN_PHOTO_ITEMS=on row $t b16-$(basename $t) models yunet-2023mar --sizes 640x640 --batch 16 \
    --paths gpu-photo-batch,gpu-photo --repeat 30
done
row $O w4120-before photos /tmp/p20 --paths gpu $E
row $N w4120-native photos /tmp/p20 --paths gpu $E
# stop 56: batch programs on the new tree (the default once a second host agrees), then where the feeding thread's
# time goes now (native frames), against run22's profile
FACERUN_PHOTO_ITEMS=on row $N d4120-native-items-1 photos /tmp/p20 --paths gpu
row $N d4120-native-3 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_ITEMS=on row $N d4120-native-items-2 photos /tmp/p20 --paths gpu
profile $N
