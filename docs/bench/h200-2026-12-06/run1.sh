# call 1 of 2026-12-06: the fused 1x1 + depthwise pass on and off (FACERUN_GPU_SEPARABLE) in one tree, YuNet at
# 640x640 b1/b16 and at photo sizes b8 beside torch CUDA strict, the kernel families, then the library run
source docs/bench/h200-issue35/setup.sh
D=docs/bench/h200-2026-12-06
nvidia-smi --query-gpu=name --format=csv,noheader
for sep in on off on; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD y640-$sep models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu,gpu-photo,gpu-batch
done
row $PWD y640-torch models yunet-2023mar --sizes 640x640 --batch 16 --paths torch-cuda-strict,torch-cuda-strict-batch
for sep in on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD sizes-$sep models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths gpu,gpu-batch
done
row $PWD sizes-torch models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths torch-cuda-strict,torch-cuda-strict-batch
export FACERUN_GPU_SEPARABLE=on
row $PWD kernels models yunet-2023mar --sizes 640x640,1280x736 --batch 16 --paths gpu-batch --by-kernel
python3 $D/kernels.py kernels /tmp/json/kernels.json
for sep in on off on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD photos-$sep photos $P --paths gpu
done
export FACERUN_GPU_SEPARABLE=on
row $PWD floor-206 photos $P --paths decode,decode-processes
for sep in on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD p4120-$sep photos /tmp/p20 --paths gpu
done
export FACERUN_GPU_SEPARABLE=on
row $PWD floor-4120 photos /tmp/p20 --paths decode,decode-processes
tar czf $OUT/call1.tgz -C /tmp json
