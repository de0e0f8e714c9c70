# Stop 54's fifth call (issue 37), ready but not run: the session's device time ran out. Cut to fit it: queue writes of tens of MB in pieces
# (FACERUN_UPLOAD_PIECE_MB) against one write (upload.py's columns, then YuNet's batch of 16 from a float32 blob: 79 MB
# of input, gpu-batch, in turn), and the split batch from photos' bytes with its candidate rows in 3 dispatches.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s54
PYTHONPATH=/tmp/site:$N python3 -P benchmarks/upload.py --rounds 7 --mb 19.7,78.6 --piece-mb 8
B="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch --roofline --repeat 20"
for i in 1 2; do
  FACERUN_UPLOAD_PIECE_MB=0 row $N whole-$i $B
  row $N pieces-8-$i $B
done
FACERUN_PHOTO_ITEMS=on row $N rows-split models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch --repeat 30
