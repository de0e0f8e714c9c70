# call 3 of stop 45: where each thread of the library run spends its time, waits included (py-spy --idle: every
# thread sampled; benchmarks/gil_share.py's "at" lists are each role's innermost facerun line), the 4120 photos at
# batch 8 (a photo a run, rows chosen); then 15 decoding threads against the default 12
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export FACERUN_PHOTO_BATCH=8
mkdir -p /tmp/json
PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-main /tmp/site/bin/py-spy record --idle --threads --nonblocking \
  -r 100 --format raw -o $OUT/idle.txt -- python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench photos /tmp/p20 --paths gpu --json \
  > /tmp/json/idle.json 2> /tmp/json/idle.err || tail -5 /tmp/json/idle.err
python3 docs/bench/h200-issue35/rows.py idle /tmp/json/idle.json
python3 benchmarks/gil_share.py $OUT/idle.txt --rate 100 --photos 4120 --top 12 | grep -v "(cli.py)\|bench/photo\|commands/bench"
row $PWD w15 photos /tmp/p20 --paths gpu --workers 15
row $PWD w12 photos /tmp/p20 --paths gpu
