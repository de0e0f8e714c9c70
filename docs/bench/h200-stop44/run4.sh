# call 4 of stop 44: a batch program's items checked apart once a model (not three CPU runs at every bucket), and
# the switch interval as a setting (FACERUN_SWITCH_INTERVAL_MS): the library rows again, 206 and 4120 photos
# (FACERUN_SWITCH_INTERVAL_MS was a setting of the code this call ran; not kept after it: no effect beyond noise)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for sw in 5 0.5; do
  export FACERUN_SWITCH_INTERVAL_MS=$sw
  for cfg in "8 on" "8 off" "1 on"; do
    set -- $cfg; export FACERUN_PHOTO_BATCH=$1 FACERUN_PHOTO_ITEMS=$2
    row $PWD p206-b$1-$2-sw$sw photos $P --paths gpu
    row $PWD p4120-b$1-$2-sw$sw photos /tmp/p20 --paths gpu
  done
done
export FACERUN_PHOTO_BATCH=16 FACERUN_PHOTO_ITEMS=on FACERUN_SWITCH_INTERVAL_MS=0.5
row $PWD p4120-b16-on-sw0.5 photos /tmp/p20 --paths gpu
export FACERUN_PHOTO_BATCH=8
row $PWD p4120-b8-on-dp-sw0.5 photos /tmp/p20 --paths gpu-decoder-processes
export FACERUN_PHOTO_BATCH=1
row $PWD floor-4120 photos /tmp/p20 --paths decode,decode-processes
