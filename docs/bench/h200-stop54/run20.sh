# Stop 54's fifth call (issue 37): queue writes of tens of MB in pieces (FACERUN_UPLOAD_PIECE_MB) against one write:
# upload.py's columns, then YuNet's batch of 16 from a float32 blob (79 MB of input, gpu-batch) in turn.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s54
for p in 8 2 32; do PYTHONPATH=/tmp/site:$N python3 -P benchmarks/upload.py --rounds 9 --mb 19.7,78.6 --piece-mb $p; done
B="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch --roofline --repeat 30"
for i in 1 2; do
  FACERUN_UPLOAD_PIECE_MB=0 row $N whole-$i $B
  row $N pieces-8-$i $B
  FACERUN_UPLOAD_PIECE_MB=2 row $N pieces-2-$i $B
done
# the candidate rows of a batch program's items in one dispatch a level (3, not 48) and one copy: the split batch again
for i in 1 2; do
  FACERUN_PHOTO_ITEMS=on row $N rows-split-$i models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch --repeat 30
done
