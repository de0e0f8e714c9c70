# call 2: the library run beside the decode floor (206 and 4120 photos), the replay list's A/B, and the kernels' roofline
source docs/bench/h200-issue35/setup.sh
T=$PWD
for round in 1 2; do
  row $T photos206-$round photos $P --paths decode,decode-processes,gpu,gpu-decoder-processes,opencv-threads
done
row $T photos4120 photos /tmp/p20 --paths decode,decode-processes,gpu,gpu-decoder-processes,opencv-threads
row $T photos206-embed photos $P --paths gpu,gpu-decoder-processes --embedder mobilefacenet --batch 16
FACERUN_GPU_REPLAY=api row $T photos4120-api photos /tmp/p20 --paths gpu
row $T roofline models yunet-2023mar auraface-arch sface-arch --sizes 640x640 --batch 16 --paths gpu,gpu-photo,gpu-batch,gpu-batch-f16,torch-cuda-strict,torch-cuda-strict-batch
row $T yunet-sizes models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths gpu,gpu-batch,torch-cuda-strict,torch-cuda-strict-batch
PYTHONPATH=/tmp/site:$T FACERUN_CACHE=/tmp/cache-main python3 -P -c "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench models yunet-2023mar auraface-arch --sizes 640x640 --batch 16 --paths gpu,gpu-batch --by-kernel 2>&1 | tail -40
PYTHONPATH=/tmp/site:$T FACERUN_CACHE=/tmp/cache-main python3 benchmarks/replay_ab.py /tmp/p20/r1 --batch 8 2>&1 | tail -15
tar czf $OUT/call2.tgz -C /tmp json
