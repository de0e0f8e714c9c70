# Stop 52's third call: a library three times longer (12360 photos: the start-up of processes spread thinner), and
# `facerun index` / `detect` end to end over 4120 photos copied (not hard links: the index lists a linked photo once).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s52
E="--embedder MobileFaceNet"
mkdir -p /tmp/p60 && for i in $(seq 60); do [ -d /tmp/p60/r$i ] || cp -al $PWD/.device/photos /tmp/p60/r$i; done
mkdir -p /tmp/c20 && for i in $(seq 20); do [ -d /tmp/c20/r$i ] || cp -r $PWD/.device/photos /tmp/c20/r$i; done
row $N floor60 photos /tmp/p60 --paths decode-processes
row $N one60 photos /tmp/p60 --paths gpu $E
row $N p4-60 photos /tmp/p60 --paths gpu-processes --processes 4 $E
T=docs/bench/h200-stop52/cli_time.py
I="index /tmp/c20 --embedder MobileFaceNet --json --db"
python3 $T index-one $N -- $I /tmp/i1.db
python3 $T index-p4 $N -- $I /tmp/i2.db --processes 4
python3 $T index-one-2 $N -- $I /tmp/i3.db
python3 $T index-p4-2 $N -- $I /tmp/i4.db --processes 4
python3 $T detect-one $N -- detect /tmp/c20 --json
python3 $T detect-p4 $N -- detect /tmp/c20 --json --processes 4
row $N floor20 photos /tmp/p20 --paths decode,decode-processes
