# call 4 of stop 45: the library run feeding the network the oldest photo decoded (not the oldest photo) and GPU
# detectors decoding over 12 threads (runs had 8), against the tree before (.device/before, 55f3d89), 4120 photos,
# batch 8, one call
source docs/bench/h200-issue35/setup.sh
export FACERUN_PHOTO_BATCH=8
row $PWD/.device/before before photos /tmp/p20 --paths gpu
row $PWD/.device/before before-w12 photos /tmp/p20 --paths gpu --workers 12
row $PWD after photos /tmp/p20 --paths gpu
