# Stop 54's second call (issue 36): the whole job's first photo on the GPU with stop 53's change (its faces a batch of
# their own), and where `--processes` starts to pay: `index` of 618, 1030 and 2060 photos in one process against 4.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s54
E="--embedder MobileFaceNet"
T=docs/bench/h200-stop52/cli_time.py
first() { python3 -c "import json,sys; r=json.load(open('/tmp/json/$1.json'))['rows'][0]; print(f\"{'':>16} first {r['first_photo_ms']:.0f} ms; one-off s {r['one_off_seconds']}\")"; }
row $N small photos $PWD/.device/photos --paths gpu $E; first small
row $N small-2 photos $PWD/.device/photos --paths gpu $E; first small-2
python3 $T index-206 $N -- index $PWD/.device/photos $E --json --db /tmp/i1.db
for n in 3 5 10; do
  mkdir -p /tmp/q$n; for i in $(seq $n); do cp -al /tmp/p20/r$i /tmp/q$n/r$i; done
done
for n in 3 5 10; do
  for p in 1 4; do python3 $T index-q$n-p$p $N -- index /tmp/q$n $E --json --processes $p --db /tmp/q$n-$p.db; done
  for p in 4 1; do python3 $T index-q$n-p$p $N -- index /tmp/q$n $E --json --processes $p --db /tmp/q$n-$p-b.db; done
done
row $N p4120 photos /tmp/p20 --paths gpu $E; first p4120
# detect alone on the 4120 beside decoding alone, and read ahead by bucket (its headers now read on the decoding threads)
row $N d4120 photos /tmp/p20 --paths decode,decode-processes,gpu
FACERUN_PHOTO_LOOKAHEAD=256 row $N d4120-look photos /tmp/p20 --paths gpu
row $N d4120-2 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_LOOKAHEAD=256 row $N d4120-look-2 photos /tmp/p20 --paths gpu
