# call 2 of stop 49 (call 1 never got a machine): the shortest decisive set, one row each, in order of weight.
# Trees: .device/cur = 3e44c6b (stop 48 as landed), .device/emb = this stop (the embedding thread, FACERUN_PHOTO_HELD)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
E=$PWD/.device/emb
row $C s48-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $E thread-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C cur photos /tmp/p20 --paths gpu
FACERUN_PHOTO_ITEMS=on row $C items photos /tmp/p20 --paths gpu
FACERUN_PHOTO_HELD=64 row $E held64 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_HELD=64 FACERUN_PHOTO_ITEMS=on row $E held64-items photos /tmp/p20 --paths gpu
FACERUN_PHOTO_HELD=64 FACERUN_PHOTO_ITEMS=on row $E held64-items-thread-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $E thread-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C s48-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C floor photos /tmp/p20 --paths decode-processes
