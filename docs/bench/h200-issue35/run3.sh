# call 3: the library run's regression against d2db377 located: photos batched by bucket (FACERUN_PHOTO_BATCH 8) or
# not (1), before/after alternating on the 206 and 4120 photos, and the feeding thread under cProfile
source docs/bench/h200-issue35/setup.sh
B=$PWD/.device/base
for round in 1 2; do
  row $B before-206-$round --photos $P --paths gpu
  FACERUN_PHOTO_BATCH=8 row $PWD b8-206-$round photos $P --paths gpu
  FACERUN_PHOTO_BATCH=1 row $PWD b1-206-$round photos $P --paths gpu
done
row $B before-4120 --photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BATCH=8 row $PWD b8-4120 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BATCH=1 row $PWD b1-4120 photos /tmp/p20 --paths gpu
PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-main python3 benchmarks/library_profile.py $P --top 30 2>&1 | head -120
