# call 6 of stop 44: batches of photos read back through the model's ring of two buffers (not two per bucket
# program): the 4120 at batch 8, a photo a run and batch programs, threads and decoder processes
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_BATCH=8
for items in on off on off; do
  FACERUN_PHOTO_ITEMS=$items row $PWD p4120-b8-$items photos /tmp/p20 --paths gpu --workers 12
done
FACERUN_PHOTO_ITEMS=on row $PWD p4120-b8-on-dp photos /tmp/p20 --paths gpu-decoder-processes
FACERUN_PHOTO_ITEMS=off row $PWD p4120-b8-off-dp photos /tmp/p20 --paths gpu-decoder-processes
