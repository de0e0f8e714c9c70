# call 2 of stop 48 (run1.sh cut to what the device time left allows), 4120 photos: the whole job with MobileFaceNet,
# this stop (.device/cur = f1fa3b2), the same with the faces aligned on the host, stop 47 as landed (.device/new =
# 5531f7d); detect alone, stop 47 then this stop; the floor
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
row $C cur-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD/.device/new s47-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
FACERUN_GPU_ALIGN=off row $C hostalign-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD/.device/new s47-1 photos /tmp/p20 --paths gpu
row $C cur-1 photos /tmp/p20 --paths gpu
row $C floor photos /tmp/p20 --paths decode-processes
row $PWD/.device/noslack noslack-1 photos /tmp/p20 --paths gpu
row $C cur-2 photos /tmp/p20 --paths gpu
