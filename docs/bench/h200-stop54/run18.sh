# Stop 54's third call: run16's batch of 16 again (its first rows were cut from the reply), a library run's detect
# with the batch split (the default) against FACERUN_PHOTO_SPLIT=0 in turn, and where `--processes` starts to pay:
# `index` of 618, 1030 and 2060 copied photos (run17's hard links were one photo each to `index`) in 1 process and 4.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s54
E="--embedder MobileFaceNet"
T=docs/bench/h200-stop52/cli_time.py
B16="models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch --repeat 30"
for i in 1 2; do
  FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SELECT=off FACERUN_PHOTO_SPLIT=0 row $N heads-whole-$i $B16
  FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SPLIT=0 row $N rows-$i $B16
  FACERUN_PHOTO_ITEMS=on row $N rows-split-$i $B16
done
for i in 1 2; do
  row $N d4120-split-$i photos /tmp/p20 --paths gpu
  FACERUN_PHOTO_SPLIT=0 row $N d4120-whole-$i photos /tmp/p20 --paths gpu
done
for n in 3 5 10; do
  mkdir -p /tmp/c$n; for i in $(seq $n); do cp -r $PWD/.device/photos /tmp/c$n/r$i; done
done
for n in 3 5 10; do
  for p in 1 4 4 1; do python3 $T index-c$n-p$p $N -- index /tmp/c$n $E --json --processes $p --db /tmp/c$n-$p-$RANDOM.db; done
done
