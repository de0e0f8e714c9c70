# call 4 of stop 46: issue 37's photo sizes fed as a library run's batches (8 photos' bytes in one submission),
# recording with the lock held (the default) against cffi (FACERUN_GPU_REPLAY=native), one call
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in held native; do
  FACERUN_GPU_REPLAY=$mode row $PWD $mode models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 \
    --paths gpu-photo,gpu-photo-batch --repeat 20 --budget 1
done
