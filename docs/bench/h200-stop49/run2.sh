# Stop 49's A/B, the shortest decisive set, one row each in order of weight (call 1 never got a machine; this was
# never run either). Trees (made here before the call, see README.md): .device/cur = 3e44c6b (stop 48 as landed),
# .device/emb = 655265b (the embedding thread, FACERUN_PHOTO_HELD, FACERUN_PHOTO_LOOKAHEAD)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
E=$PWD/.device/emb
row $C s48-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $E thread-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C cur photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 row $E look256 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_PHOTO_ITEMS=on row $E look256-items photos /tmp/p20 --paths gpu
FACERUN_PHOTO_ITEMS=on row $C items photos /tmp/p20 --paths gpu
FACERUN_PHOTO_HELD=64 row $E held64 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 row $E look256-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $E thread-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C s48-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C floor photos /tmp/p20 --paths decode-processes
