# Stop 52's fourth call: the launching process now runs photos on the detector its command loaded on the GPU, so it
# starts at once while the processes start; the first photo and the rates, against its own detector made late (s52a).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s52
A=$PWD/.device/s52a
E="--embedder MobileFaceNet"
mkdir -p /tmp/c20 && for i in $(seq 20); do [ -d /tmp/c20/r$i ] || cp -r $PWD/.device/photos /tmp/c20/r$i; done
row $N floor photos /tmp/p20 --paths decode-processes
row $N one photos /tmp/p20 --paths gpu $E
row $N p4 photos /tmp/p20 --paths gpu-processes --processes 4 $E
row $A p4-s52a photos /tmp/p20 --paths gpu-processes --processes 4 $E
FACERUN_PARENT_RUNS=off row $N p4-off photos /tmp/p20 --paths gpu-processes --processes 4 $E
row $N p4-2 photos /tmp/p20 --paths gpu-processes --processes 4 $E
row $N small photos $PWD/.device/photos --paths gpu,gpu-processes --processes 4 $E
T=docs/bench/h200-stop52/cli_time.py
python3 $T index-p4 $N -- index /tmp/c20 --embedder MobileFaceNet --json --db /tmp/i2.db --processes 4
python3 $T index-one $N -- index /tmp/c20 --embedder MobileFaceNet --json --db /tmp/i1.db
python3 $T detect-p4 $N -- detect /tmp/c20 --json --processes 4
