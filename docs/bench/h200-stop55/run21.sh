# Stop 55's first call (issue 37). Stop 54's unrun run20: queue writes of tens of MB in pieces (FACERUN_UPLOAD_PIECE_MB)
# against one write (upload.py's columns, then YuNet's batch of 16 from a float32 blob, gpu-batch). Then YuNet's batch
# from photos' bytes (batch programs, candidate rows, now in 3 dispatches a batch) split in 2, 3 and 4 parts
# (FACERUN_PHOTO_PARTS) against whole, staged by 8 threads (gpu-photo-staged-batch), and each part staged by 4
# upload threads (FACERUN_UPLOAD_THREADS), rounds in turn; and the
# AuraFace replica's batch of 16 by kernel family, f32 and f16 (where its time goes, for the half-float work).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s55
PYTHONPATH=/tmp/site:$N python3 -P benchmarks/upload.py --rounds 7 --mb 19.7,78.6 --piece-mb 8
B="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch --roofline --repeat 20"
for i in 1 2; do
  FACERUN_UPLOAD_PIECE_MB=0 row $N whole-$i $B
  FACERUN_UPLOAD_PIECE_MB=8 row $N pieces-8-$i $B
done
B16="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch --repeat 30"
S16="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-staged-batch --repeat 30"
B8="models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo-batch --repeat 30"
export FACERUN_PHOTO_ITEMS=on
for i in 1 2; do
  FACERUN_PHOTO_PARTS=1 row $N b16-whole-$i $B16
  FACERUN_PHOTO_PARTS=2 row $N b16-parts2-$i $B16
  FACERUN_PHOTO_PARTS=3 row $N b16-parts3-$i $B16
  FACERUN_PHOTO_PARTS=4 row $N b16-parts4-$i $B16
  FACERUN_PHOTO_PARTS=2 row $N b16-staged-parts2-$i $S16
  FACERUN_UPLOAD_THREADS=4 FACERUN_PHOTO_PARTS=2 row $N b16-threads4-parts2-$i $B16
  FACERUN_UPLOAD_THREADS=4 FACERUN_PHOTO_PARTS=4 row $N b16-threads4-parts4-$i $B16
done
FACERUN_PHOTO_PARTS=2 row $N b8-parts2 $B8
FACERUN_PHOTO_PARTS=4 row $N b8-parts4 $B8
FACERUN_UPLOAD_THREADS=4 FACERUN_PHOTO_PARTS=4 row $N b8-threads4-parts4 $B8
unset FACERUN_PHOTO_ITEMS
for p in gpu-batch gpu-batch-f16; do
  PYTHONPATH=/tmp/site:$N FACERUN_CACHE=/tmp/cache-s55 python3 -P -c "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" \
    bench models auraface-arch --batch 16 --paths $p --by-kernel --repeat 20 2>&1 | grep -v "peaks {" | tail -22
done
