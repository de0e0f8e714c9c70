# call 1 of stop 48, 4120 photos. The whole job with MobileFaceNet first: this stop (.device/cur = f1fa3b2: embedding
# batches left running, faces aligned on the device, the similarity fit in closed form, a batch of photos waiting on
# post-processing), the same with the faces aligned on the host (FACERUN_GPU_ALIGN=off), stop 47 as landed
# (.device/new = 5531f7d), this stop with 8 post-processing threads; where its threads spend their time (py-spy
# --idle); the floor; detect alone, alternating: stop 47 as landed, this stop without the post-processing slack
# (.device/noslack = 115d777), this stop; and stop 47's late changes against the tree before them (.device/prev)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
C=$PWD/.device/cur
row $C cur-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
FACERUN_GPU_ALIGN=off row $C hostalign-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD/.device/new s47-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
for round in 1 2; do
  row $PWD/.device/new s47-$round photos /tmp/p20 --paths gpu
  row $PWD/.device/noslack noslack-$round photos /tmp/p20 --paths gpu
  row $C cur-$round photos /tmp/p20 --paths gpu
done
PYTHONPATH=/tmp/site:$C FACERUN_CACHE=/tmp/cache-cur /tmp/site/bin/py-spy record --idle --threads \
  --nonblocking -r 100 --format raw -o $OUT/embed-idle.txt -- python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench photos /tmp/p20 --paths gpu \
  --embedder MobileFaceNet --json > /tmp/json/spy.json 2> /tmp/json/spy.err || tail -5 /tmp/json/spy.err
python3 docs/bench/h200-issue35/rows.py spy /tmp/json/spy.json
python3 benchmarks/gil_share.py $OUT/embed-idle.txt --rate 100 --photos 4120 --top 14 | grep -v "(cli.py)\|bench/photo\|commands/bench"
row $C floor photos /tmp/p20 --paths decode-processes
FACERUN_POST_THREADS=8 row $C post8-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C cur-embed-2 photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $C cur-206 photos $P --paths gpu --embedder MobileFaceNet
for round in 1 2; do
  row $PWD/.device/prev prev-$round photos /tmp/p20 --paths gpu
  row $PWD/.device/new s47b-$round photos /tmp/p20 --paths gpu
done
