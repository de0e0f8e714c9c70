# call 1 of stop 45: who holds the interpreter lock in the library run (py-spy --gil, benchmarks/gil_share.py),
# beside the rows it samples; the 4120 photos at batch 8 (a photo a run), decoding on threads and in processes
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_BATCH=8
row $PWD b8 photos /tmp/p20 --paths gpu,gpu-decoder-processes
spy() {  # label, py-spy flags, then bench args: the run under py-spy, its row and the lock's summary
  label=$1; flags=$2; shift 2
  PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-main /tmp/site/bin/py-spy record $flags --threads --nonblocking \
    -r 200 --format raw -o $OUT/$label.txt -- python3 -P -c \
    "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench "$@" --json \
    > /tmp/json/$label.json 2> /tmp/json/$label.err || { echo "$label failed"; tail -5 /tmp/json/$label.err; return; }
  python3 docs/bench/h200-issue35/rows.py $label /tmp/json/$label.json
  python3 benchmarks/gil_share.py $OUT/$label.txt --rate 200 --photos 4120 --top 12
}
spy gil-threads --gil photos /tmp/p20 --paths gpu
spy gil-processes --gil photos /tmp/p20 --paths gpu-decoder-processes
spy all-threads --idle photos /tmp/p20 --paths gpu
row $PWD floor photos /tmp/p20 --paths decode,decode-processes
