# Stop 50's third call: the embedding thread really on (the fix of 0fb6076's successor: a GPU net names its adapter
# as its device), the lookahead's headers read on the decoding threads. Trees: .device/cur = 3e44c6b (stop 48 as
# landed), .device/new2 = 25449f7 (this stop). Two rounds of the deciding rows, then the floor.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
N=$PWD/.device/new2
for round in 1 2; do
  row $C s48-embed-$round photos /tmp/p20 --paths gpu --embedder MobileFaceNet
  row $N thread-embed-$round photos /tmp/p20 --paths gpu --embedder MobileFaceNet
  [ $round = 1 ] && FACERUN_EMBED_THREAD=off row $N nothread-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
  FACERUN_PHOTO_LOOKAHEAD=256 row $N look256-$round photos /tmp/p20 --paths gpu
  [ $round = 1 ] && FACERUN_PHOTO_LOOKAHEAD=256 FACERUN_PHOTO_ITEMS=on row $N look256-items photos /tmp/p20 --paths gpu
done
FACERUN_PHOTO_LOOKAHEAD=256 row $N look256-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C floor photos /tmp/p20 --paths decode-processes
