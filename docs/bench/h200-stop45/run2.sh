# call 2 of stop 45: candidate rows chosen on the device (FACERUN_PHOTO_SELECT, on by default) against the heads read
# back whole (off), alternating in one call, the 4120 photos at batch 1 and 8 (a photo a run); batch programs;
# decoding in processes; then who holds the interpreter lock with rows chosen (py-spy --gil, benchmarks/gil_share.py)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for round in 1 2; do
  for b in 1 8; do
    for sel in off on; do
      FACERUN_PHOTO_BATCH=$b FACERUN_PHOTO_SELECT=$sel row $PWD b$b-$sel-r$round photos /tmp/p20 --paths gpu
    done
  done
done
for sel in off on; do  # batch programs (one pass a batch)
  FACERUN_PHOTO_BATCH=8 FACERUN_PHOTO_ITEMS=on FACERUN_PHOTO_SELECT=$sel row $PWD items-b8-$sel photos /tmp/p20 --paths gpu
done
for sel in off on; do
  FACERUN_PHOTO_BATCH=8 FACERUN_PHOTO_SELECT=$sel row $PWD dp-b8-$sel photos /tmp/p20 --paths gpu-decoder-processes
done
for sel in off on; do FACERUN_PHOTO_SELECT=$sel row $PWD p206-$sel photos $P --paths gpu; done
spy() {  # label, py-spy flags, then bench args: the run under py-spy, its row and the lock's summary
  label=$1; flags=$2; shift 2
  PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-main /tmp/site/bin/py-spy record $flags --threads --nonblocking \
    -r 200 --format raw -o $OUT/$label.txt -- python3 -P -c \
    "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench "$@" --json \
    > /tmp/json/$label.json 2> /tmp/json/$label.err || { echo "$label failed"; tail -5 /tmp/json/$label.err; return; }
  python3 docs/bench/h200-issue35/rows.py $label /tmp/json/$label.json
  python3 benchmarks/gil_share.py $OUT/$label.txt --rate 200 --photos 4120 --top 12
}
FACERUN_PHOTO_BATCH=8 spy gil-b8-on --gil photos /tmp/p20 --paths gpu
row $PWD floor photos /tmp/p20 --paths decode,decode-processes
