# call 3 of stop 44: is the library run bound by the GIL's hand-over? The same rows with CPython's switch interval
# at its 5 ms and at 0.5 ms (the feeding thread gets the GIL back sooner after each C call), and the feeding thread
# alone on every bucket's photos (partial batches, as the library meets them)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
rowsw() {  # switch interval (s), label, bench args
  sw=$1; label=$2; shift 2
  PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-sw python3 -P -c "import sys; sys.setswitchinterval($sw); from facerun.cli import main; sys.argv[0]='facerun'; main()" bench "$@" --json > /tmp/json/$label.json 2> /tmp/json/$label.err || { echo "$label failed"; tail -3 /tmp/json/$label.err; return; }
  python3 docs/bench/h200-issue35/rows.py $label /tmp/json/$label.json
}
mkdir -p /tmp/json
for sw in 0.005 0.0005; do
  for cfg in "8 on" "8 off" "1 on"; do
    set -- $cfg; export FACERUN_PHOTO_BATCH=$1 FACERUN_PHOTO_ITEMS=$2
    rowsw $sw p4120-b$1-$2-sw$sw photos /tmp/p20 --paths gpu
  done
done
export FACERUN_PHOTO_BATCH=8 FACERUN_PHOTO_ITEMS=on
rowsw 0.0005 p4120-b8-on-dp-sw0.0005 photos /tmp/p20 --paths gpu-decoder-processes
PYTHONPATH=/tmp/site:$PWD python3 benchmarks/photo_batches.py $P --batch 8 --rounds 3 --buckets 43 2>&1 | grep -v Warn
