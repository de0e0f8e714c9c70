# Stop 57's call (issues 36 and 37). Trees, carried packed in .device/trees.tar.gz (setup.sh unpacks them):
# .device/s55 = 3d355d4 (stop 55), .device/s56 = 07bbb15 (hurried photos, pools folded: 40 dispatches),
# .device/s57 = c5d0e4b (this stop: YuNet's heads a pass a stride, 31 dispatches).
# First: the library run, detect on the 4120 photos, stop 55 and this stop, its photos hurried (the default) and
# forced (FACERUN_PHOTO_HURRY=0); YuNet at 40 and 31 dispatches, batch 16 and a photo at 640x640, batch 8 at 1024x704
# and 1280x736. Then, as time allows: decoding in processes, second rounds, coarser buckets (256), more photos held
# while batches fill (64, not 16), the whole job, the feeding thread's profile, YuNet's dispatches one by one.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
O=$PWD/.device/s55
M=$PWD/.device/s56
N=$PWD/.device/s57
E="--embedder MobileFaceNet"
row $O d4120-s55-1 photos /tmp/p20 --paths gpu
row $N d4120-hurried-1 photos /tmp/p20 --paths gpu
for t in $M $N; do
  row $t b16-$(basename $t) models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch,gpu-photo --repeat 30 \
    --roofline
done
FACERUN_PHOTO_HURRY=0 row $N d4120-forced-1 photos /tmp/p20 --paths gpu
for t in $M $N; do
  FACERUN_PHOTO_ITEMS=on row $t b8-$(basename $t) models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 \
    --paths gpu-photo-batch --repeat 30
done
# the rest as the call's time allows (its limit is 600 s, less where less device time is left)
left() { [ $SECONDS -lt $1 ]; }
# the decoders out of the feeding thread's GIL (stop 43's host: 217.9 against 186.6 photos/s; the feeding thread
# alone made 1243 photos/s, in the run 2.2 ms a photo)
left 280 && row $N d4120-decoder-processes photos /tmp/p20 --paths gpu-decoder-processes
left 300 && row $N d4120-hurried-2 photos /tmp/p20 --paths gpu
left 300 && row $O d4120-s55-2 photos /tmp/p20 --paths gpu
left 330 && FACERUN_PHOTO_BUCKET=256 row $N d4120-bucket256 photos /tmp/p20 --paths gpu
left 360 && FACERUN_PHOTO_HELD=64 row $N d4120-held64 photos /tmp/p20 --paths gpu
left 390 && row $N w4120-hurried photos /tmp/p20 --paths gpu $E
if left 400; then
  for t in $N $M; do
    row $t b16-$(basename $t)-2 models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch,gpu-photo \
      --repeat 30 --roofline
  done
fi
left 420 && profile $N
if left 480; then
  PYTHONPATH=/tmp/site:$N:$PWD/benchmarks FACERUN_CACHE=/tmp/cache-s57 python3 -P benchmarks/gpu_families.py \
    yunet-2023mar --shape 16,3,640,640 --repeat 10 --rounds 3 --each > $OUT/yunet-each.txt 2>&1
  head -20 $OUT/yunet-each.txt
  python3 docs/bench/h200-stop56/each_sum.py $OUT/yunet-each.txt
fi
echo "elapsed $SECONDS s"
