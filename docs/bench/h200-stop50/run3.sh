# Stop 50's second call, right after run2.sh on the same warm machine: issue 37's YuNet rows from photos' bytes in
# batch programs (FACERUN_PHOTO_ITEMS=on) and photo by photo, then a second round of run2's deciding rows.
# Trees as in ../h200-stop49/README.md (.device/cur = 3e44c6b, .device/emb = 6a63513), and .device/new = 0fb6076
# (a short batch program runs only its photos' workgroups; headers read from the JPEG markers).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
E=$PWD/.device/emb
N=$PWD/.device/new
for items in off on; do
  FACERUN_PHOTO_ITEMS=$items row $E y640-$items models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo,gpu-photo-batch,gpu-batch --roofline
  FACERUN_PHOTO_ITEMS=$items row $E sizes-$items models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo,gpu-photo-batch --roofline
done
row $C cur-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 row $E look256-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_PHOTO_ITEMS=on row $E look256-items-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_PHOTO_ITEMS=on row $N new-look256-items photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_PADDING=run row $N new-look256-items-pad photos /tmp/p20 --paths gpu
FACERUN_PHOTO_ITEMS=on row $N new-items photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=512 FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_BATCH=16 row $N new-look512-items16 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_EMBED_THREAD=off row $E look256-noembedthread photos /tmp/p20 --paths gpu --embedder MobileFaceNet
PHOTO=$(ls .device/photos/wider/images/*/*.jpg | head -1)
PYTHONPATH=/tmp/site:$N FACERUN_CACHE=/tmp/cache-new python3 -P benchmarks/short_batches.py $PHOTO --side 1280 --items 8 --rounds 7 --repeat 5
