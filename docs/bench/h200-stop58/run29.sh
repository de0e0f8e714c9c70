# Stop 58's call (issues 36 and 37), after `bash docs/bench/h200-stop58/prep.sh` here; carry .device .gl .whl.
# Trees (.device/trees.tar.gz, unpacked by setup.sh): s55 = 3d355d4 (stop 55, the last timed tree), s56 = 07bbb15
# (hurried photos, pools folded: 40 dispatches), s58 = HEAD (heads a pass a stride: 31 dispatches; a model's passed
# check kept for later processes; FACERUN_DECODERS).
# First: the library run on the 4120 photos, stop 55 against now, decoding on threads and in processes; YuNet at 40
# and 31 dispatches (batch 16 and a photo at 640x640); the first photo with the kept check off and on; batch 8 at
# 1024x704 and 1280x736; hurried against forced. Then, as the call's time allows, second rounds and the rest.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
O=$PWD/.device/s55
M=$PWD/.device/s56
N=$PWD/.device/s58
E="--embedder MobileFaceNet"
row $O d4120-s55-1 photos /tmp/p20 --paths gpu
row $N d4120-s58-1 photos /tmp/p20 --paths gpu
row $N d4120-decproc-1 photos /tmp/p20 --paths gpu-decoder-processes
for t in $M $N; do
  row $t b16-$(basename $t) models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch,gpu-photo --repeat 30 \
    --roofline
done
# the first photo, 206 photos, each row a process: the model's check run (off) or kept from an earlier row (on)
for c in off on off on; do
  FACERUN_GPU_CHECK_CACHE=$c row $N first-$c photos $PWD/.device/photos --paths gpu
done
for t in $M $N; do
  FACERUN_PHOTO_ITEMS=on row $t b8-$(basename $t) models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 \
    --paths gpu-photo-batch --repeat 30
done
FACERUN_PHOTO_HURRY=0 row $N d4120-forced-1 photos /tmp/p20 --paths gpu
# the rest as the call's time allows (its limit is 600 s, less where less device time is left)
left() { [ $SECONDS -lt $1 ]; }
left 300 && row $N d4120-decproc-2 photos /tmp/p20 --paths gpu-decoder-processes
left 300 && row $N d4120-s58-2 photos /tmp/p20 --paths gpu
left 320 && row $O d4120-s55-2 photos /tmp/p20 --paths gpu
left 340 && FACERUN_PHOTO_BUCKET=256 row $N d4120-bucket256 photos /tmp/p20 --paths gpu
left 360 && FACERUN_PHOTO_HELD=64 row $N d4120-held64 photos /tmp/p20 --paths gpu
left 380 && row $N w4120 photos /tmp/p20 --paths gpu $E
# four processes, each now trusting the check its predecessors kept (their start-up is in the clock)
left 400 && row $N d4120-proc4 photos /tmp/p20 --paths gpu-processes --processes 4
left 400 && row $O d4120-proc4-s55 photos /tmp/p20 --paths gpu-processes --processes 4
if left 440; then
  for t in $N $M; do
    row $t b16-$(basename $t)-2 models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch,gpu-photo \
      --repeat 30 --roofline
  done
fi
left 460 && profile $N
if left 510; then
  PYTHONPATH=/tmp/site:$N:$PWD/benchmarks FACERUN_CACHE=/tmp/cache-s58 python3 -P benchmarks/gpu_families.py \
    yunet-2023mar --shape 16,3,640,640 --repeat 10 --rounds 3 --each > $OUT/yunet-each.txt 2>&1
  head -20 $OUT/yunet-each.txt
  python3 docs/bench/h200-stop56/each_sum.py $OUT/yunet-each.txt
fi
echo "elapsed $SECONDS s"
