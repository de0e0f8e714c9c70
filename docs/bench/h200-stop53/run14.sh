# Stop 53's last call: the embedder made ready on a thread while the first photos are detected (FACERUN_EMBED_WARM,
# on by default) against off, the whole job on the 206 and the 4120 photos, and `index` of the 206 end to end (issue
# 36's first photo); then where YuNet's batch of 16 from photos' bytes spends its wall time (py-spy, issue 37).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s53b
E="--embedder MobileFaceNet"
T=docs/bench/h200-stop52/cli_time.py
first() { python3 -c "import json,sys; r=json.load(open('/tmp/json/$1.json'))['rows'][0]; print(f\"{'':>16} first {r['first_photo_ms']:.0f} ms; one-off s {r['one_off_seconds']}\")"; }
for i in 1 2; do
  row $N warm-on photos $PWD/.device/photos --paths gpu $E; first warm-on
  FACERUN_EMBED_WARM=off row $N warm-off photos $PWD/.device/photos --paths gpu $E; first warm-off
done
row $N warm-on-4120 photos /tmp/p20 --paths gpu $E; first warm-on-4120
FACERUN_EMBED_WARM=off row $N warm-off-4120 photos /tmp/p20 --paths gpu $E; first warm-off-4120
for i in 1 2; do
  python3 $T index-206-on $N -- index $PWD/.device/photos $E --json --db /tmp/on$i.db
  FACERUN_EMBED_WARM=off python3 $T index-206-off $N -- index $PWD/.device/photos $E --json --db /tmp/off$i.db
done
S=docs/bench/h200-stop53/stacks.py
FACERUN_PHOTO_ITEMS=on /tmp/site/bin/py-spy record -r 1000 --idle -f raw -o /tmp/b16.txt -- \
  env PYTHONPATH=/tmp/site:$N FACERUN_CACHE=/tmp/cache-s53b python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench models yunet-2023mar --sizes 640x640 \
  --batch 16 --paths gpu-photo-batch --repeat 500 --budget 30 --json > /tmp/json/b16.json 2> /tmp/json/b16.err
python3 docs/bench/h200-issue35/rows.py b16 /tmp/json/b16.json | grep -v "peaks {"
python3 $S /tmp/b16.txt "_gpu_photo_batch.<locals>.run" 24
