# Stop 52's call: the processes engine with each process embedding its own faces, and the launching process running
# photos until its processes are ready (FACERUN_PARENT_RUNS), against one process and stop 51's processes (the
# parent embedding every face). Trees: .device/s51 = d023462 (stop 51 as landed), .device/s52 = this stop.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
O=$PWD/.device/s51
N=$PWD/.device/s52
row $N floor photos /tmp/p20 --paths decode-processes
row $N one-1 photos /tmp/p20 --paths gpu
row $N procs4 photos /tmp/p20 --paths gpu-processes --processes 4
row $N one-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $N procs4-embed photos /tmp/p20 --paths gpu-processes --processes 4 --embedder MobileFaceNet
row $O s51-procs4-embed photos /tmp/p20 --paths gpu-processes --processes 4 --embedder MobileFaceNet
FACERUN_PARENT_RUNS=off row $N procs4-embed-off photos /tmp/p20 --paths gpu-processes --processes 4 --embedder MobileFaceNet
row $N procs6-embed photos /tmp/p20 --paths gpu-processes --processes 6 --embedder MobileFaceNet
row $N procs8-embed photos /tmp/p20 --paths gpu-processes --processes 8 --embedder MobileFaceNet
FACERUN_PARENT_RUNS=always row $N procs4-always photos /tmp/p20 --paths gpu-processes --processes 4
row $N procs8 photos /tmp/p20 --paths gpu-processes --processes 8
row $N one-206 photos $PWD/.device/photos --paths gpu,gpu-processes --processes 4 --embedder MobileFaceNet
row $N one-2 photos /tmp/p20 --paths gpu
row $N floor-2 photos /tmp/p20 --paths decode,decode-processes
