# Stop 52's second call: how the processes start (a fork server that loaded facerun and wgpu once, or spawned)
# and whether the launching process runs photos until they are ready, each process embedding its own faces; against
# one process, in bench rows and as `facerun index` end to end. Tree: .device/s52 = this stop.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s52
E="--embedder MobileFaceNet"
row $N floor photos /tmp/p20 --paths decode-processes
row $N one photos /tmp/p20 --paths gpu $E
row $N fs-ready photos /tmp/p20 --paths gpu-processes --processes 4 $E
FACERUN_PROCESS_START=spawn FACERUN_PARENT_RUNS=off row $N sp-off photos /tmp/p20 --paths gpu-processes --processes 4 $E
FACERUN_PARENT_RUNS=off row $N fs-off photos /tmp/p20 --paths gpu-processes --processes 4 $E
FACERUN_PROCESS_START=spawn row $N sp-ready photos /tmp/p20 --paths gpu-processes --processes 4 $E
FACERUN_PROCESS_START=spawn FACERUN_PARENT_RUNS=off row $N sp-off-2 photos /tmp/p20 --paths gpu-processes --processes 4 $E
row $N fs-ready-2 photos /tmp/p20 --paths gpu-processes --processes 4 $E
I="index /tmp/p20 --embedder MobileFaceNet --json --db"
python3 docs/bench/h200-stop52/cli_time.py index-one $N -- $I /tmp/i1.db
python3 docs/bench/h200-stop52/cli_time.py index-p4 $N -- $I /tmp/i2.db --processes 4
FACERUN_PROCESS_START=spawn FACERUN_PARENT_RUNS=off python3 docs/bench/h200-stop52/cli_time.py index-p4-spawn $N -- $I /tmp/i3.db --processes 4
python3 docs/bench/h200-stop52/cli_time.py index-p8 $N -- $I /tmp/i4.db --processes 8
python3 docs/bench/h200-stop52/cli_time.py detect-p4 $N -- detect /tmp/p20 --json --processes 4
python3 docs/bench/h200-stop52/cli_time.py detect-one $N -- detect /tmp/p20 --json
row $N small photos $PWD/.device/photos --paths gpu,gpu-processes --processes 4 $E
row $N one-2 photos /tmp/p20 --paths gpu $E
