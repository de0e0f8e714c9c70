# call 1 of stop 48 (stop 47's run2.sh, rows reordered, py-spy added), 4120 photos: the tree before stop 47's late
# changes (.device/prev = ffb0314) against stop 47 as landed (.device/new = 5531f7d: queue writes and unmapping
# with the interpreter lock held, alignment over uint8 planes, the embedder's input planes first): the whole job
# with MobileFaceNet first, then where its threads spend their time (py-spy --idle), the floor, detect alone
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
row $PWD/.device/new new-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD/.device/prev prev-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
PYTHONPATH=/tmp/site:$PWD/.device/new FACERUN_CACHE=/tmp/cache-new /tmp/site/bin/py-spy record --idle --threads \
  --nonblocking -r 100 --format raw -o $OUT/embed-idle.txt -- python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench photos /tmp/p20 --paths gpu \
  --embedder MobileFaceNet --json > /tmp/json/spy.json 2> /tmp/json/spy.err || tail -5 /tmp/json/spy.err
python3 docs/bench/h200-issue35/rows.py spy /tmp/json/spy.json
python3 benchmarks/gil_share.py $OUT/embed-idle.txt --rate 100 --photos 4120 --top 14 | grep -v "(cli.py)\|bench/photo\|commands/bench"
row $PWD floor photos /tmp/p20 --paths decode-processes
for round in 1 2; do
  row $PWD/.device/prev prev-$round photos /tmp/p20 --paths gpu
  row $PWD/.device/new new-$round photos /tmp/p20 --paths gpu
done
