# call 3 of 2026-12-06: the fused pass where it measured faster (44 dispatches), on and off, with each GPU row's
# device time (--roofline: the program alone, no upload or read-back) beside torch CUDA; AuraFace's replica; YuNet's
# dispatches one by one; the library run with photos batched by bucket (FACERUN_PHOTO_BATCH) and decoder processes
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for sep in on off on; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD y640-$sep models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu,gpu-photo,gpu-batch
  row $PWD sizes-$sep models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths gpu,gpu-batch
done
export FACERUN_GPU_SEPARABLE=on
row $PWD y640-torch models yunet-2023mar --sizes 640x640 --batch 16 --paths torch-cuda,torch-cuda-strict,torch-cuda-batch,torch-cuda-strict-batch
row $PWD sizes-torch models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths torch-cuda-strict,torch-cuda-strict-batch
row $PWD aura models auraface-arch sface-arch --sizes 112x112 --batch 16 --paths gpu,gpu-batch,gpu-batch-f16,torch-cuda-batch,torch-cuda-strict-batch
echo "== dispatches"
PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-main timeout 120 python3 -P benchmarks/gpu_families.py yunet-2023mar --shape 8,3,704,1024 --repeat 5 --rounds 3 --each 2>&1 | grep -v Warning
for sep in on off on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD photos-$sep photos $P --paths gpu
done
export FACERUN_GPU_SEPARABLE=on
row $PWD floor-206 photos $P --paths decode,decode-processes
for b in 1 4; do
  export FACERUN_PHOTO_BATCH=$b
  row $PWD p4120-b$b photos /tmp/p20 --paths gpu,gpu-decoder-processes
done
export FACERUN_PHOTO_BATCH=1
row $PWD floor-4120 photos /tmp/p20 --paths decode,decode-processes
tar czf $OUT/call3.tgz -C /tmp json
