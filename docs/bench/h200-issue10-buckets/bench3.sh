# call 4: bucket 128 against OpenCV one photo at a time and a photo per thread; 4, 6 and 8 processes; embed
source docs/bench/h200-issue10-buckets/common.sh
for round in 1 2; do
  row gpu-$round --photos $P --paths gpu
  row cv-$round --photos $P --paths opencv
  row cvt-$round --photos $P --paths opencv-threads
done
row gpu-p20 --photos /tmp/p20 --paths gpu
row cvt-p20 --photos /tmp/p20 --paths opencv-threads
for n in 4 6 8; do row procs$n-p20 --photos /tmp/p20 --paths gpu-processes --processes $n; done
row gpu-embed --photos $P --paths cpu,gpu --embed .device/models/MobileFaceNet.onnx
