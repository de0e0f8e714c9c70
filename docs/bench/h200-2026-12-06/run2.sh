# call 2 of 2026-12-06: the fused pass's second kernel (a bordered tile of 256 positions, 16 channels a workgroup) on
# and off, YuNet's dispatches timed one by one at 1024x704 batch 8, and the library run
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for sep in on off on; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD y640-$sep models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu,gpu-photo,gpu-batch
done
for sep in on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD sizes-$sep models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 --paths gpu,gpu-batch
done
for sep in on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  echo "== dispatches, FACERUN_GPU_SEPARABLE=$sep"
  PYTHONPATH=/tmp/site:$PWD FACERUN_CACHE=/tmp/cache-main timeout 150 python3 -P benchmarks/gpu_families.py yunet-2023mar --shape 8,3,704,1024 --repeat 5 --rounds 3 --each 2>&1 | grep -v Warning
done
for sep in on off on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD photos-$sep photos $P --paths gpu
done
for sep in on off; do
  export FACERUN_GPU_SEPARABLE=$sep
  row $PWD p4120-$sep photos /tmp/p20 --paths gpu
done
tar czf $OUT/call2.tgz -C /tmp json
