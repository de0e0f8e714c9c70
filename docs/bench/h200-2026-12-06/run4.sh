# call 4 of 2026-12-06, the stop's final code: the fused pass where it measured faster (44 dispatches) on and off,
# every facerun GPU row's device time (the program alone), YuNet's kernel families at batch 16, AuraFace's and
# SFace's replicas, beside torch CUDA; then the library run against the decode floor
source docs/bench/h200-issue35/setup.sh
D=docs/bench/h200-2026-12-06
nvidia-smi --query-gpu=name --format=csv,noheader
for sep in on off on; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD y640-$sep models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu,gpu-photo,gpu-batch
  row $PWD sizes-$sep models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths gpu,gpu-batch
done
export FACERUN_GPU_SEPARABLE=on
row $PWD kernels models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch --by-kernel
python3 $D/kernels.py kernels /tmp/json/kernels.json
row $PWD y640-torch models yunet-2023mar --sizes 640x640 --batch 16 --paths torch-cuda-strict,torch-cuda-batch,torch-cuda-strict-batch
row $PWD sizes-torch models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths torch-cuda-strict,torch-cuda-strict-batch
row $PWD embedders models auraface-arch sface-arch --sizes 112x112 --batch 16 --paths gpu,gpu-batch,gpu-batch-f16,torch-cuda-batch,torch-cuda-strict-batch
for sep in on off on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD photos-$sep photos $P --paths gpu
done
export FACERUN_GPU_SEPARABLE=on
row $PWD floor-206 photos $P --paths decode,decode-processes,gpu-decoder-processes
for b in 1 4; do
  export FACERUN_PHOTO_BATCH=$b
  row $PWD p4120-b$b photos /tmp/p20 --paths gpu,gpu-decoder-processes
done
export FACERUN_PHOTO_BATCH=1
row $PWD floor-4120 photos /tmp/p20 --paths decode,decode-processes
tar czf $OUT/call4.tgz -C /tmp json
