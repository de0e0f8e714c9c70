# Stop 50's third call: the embedding thread really on (a GPU net names its adapter as its device), the lookahead's
# headers read on the decoding threads, gpu-photo-batch in batch programs. Trees: .device/cur = 3e44c6b (stop 48 as
# landed), .device/new2 = f17d57f (stop 50 as landed). The deciding rows first (the device time left was short), issue 37's
# photo rows, a second round, the floor.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
N=$PWD/.device/new2
row $N thread-embed-1 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C s48-embed-1 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
FACERUN_PHOTO_LOOKAHEAD=256 row $N look256-1 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_ITEMS=on row $N y640-items models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo,gpu-photo-batch --roofline
FACERUN_PHOTO_ITEMS=on row $N sizes-items models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo-batch --roofline
FACERUN_EMBED_THREAD=off row $N nothread-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_PHOTO_ITEMS=on row $N look256-items photos /tmp/p20 --paths gpu
row $C s48-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $N thread-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
FACERUN_PHOTO_LOOKAHEAD=256 row $N look256-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 row $N look256-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C floor photos /tmp/p20 --paths decode-processes
