# Stop 51's second call: run4 (docs/bench/h200-stop51/run4.out) showed the one-process run bound by the interpreter
# lock (its feeding thread 2-3x its time alone; the embedding thread no faster than embedding on the feeding thread).
# So: processes, each its own lock, against one process in the same call; the whole job's embedding batches of 32
# and 64; decoding threads 8 against 12. Trees: .device/new2 = f17d57f (stop 50 as landed), .device/new3 = stop 51's
# gpu-photo-staged-batch row (issue 37's YuNet batches with the photos staged as a library run stages them).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/new2
N3=$PWD/.device/new3
row $N one-1 photos /tmp/p20 --paths gpu
row $N procs2 photos /tmp/p20 --paths gpu-processes --processes 2
row $N procs4 photos /tmp/p20 --paths gpu-processes --processes 4
row $N procs3 photos /tmp/p20 --paths gpu-processes --processes 3
FACERUN_PHOTO_ITEMS=on row $N3 staged models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch,gpu-photo-staged-batch --roofline
FACERUN_PHOTO_ITEMS=on row $N3 staged-sizes models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo-batch,gpu-photo-staged-batch
row $N procs2-embed photos /tmp/p20 --paths gpu-processes --processes 2 --embedder MobileFaceNet
row $N procs4-embed photos /tmp/p20 --paths gpu-processes --processes 4 --embedder MobileFaceNet
FACERUN_EMBED_THREAD=off row $N embed-b32 photos /tmp/p20 --paths gpu --embedder MobileFaceNet --batch 32
FACERUN_EMBED_THREAD=off row $N embed-b64 photos /tmp/p20 --paths gpu --embedder MobileFaceNet --batch 64
row $N workers8 photos /tmp/p20 --paths gpu --workers 8
row $N one-2 photos /tmp/p20 --paths gpu
row $N procs2-b photos /tmp/p20 --paths gpu-processes --processes 2
row $N floor photos /tmp/p20 --paths decode-processes
