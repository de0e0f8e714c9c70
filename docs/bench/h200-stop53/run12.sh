# Stop 53's second call (issue 37): the read-back beside the uploads; YuNet's batch of 16 from photos' bytes written by
# this thread against staged by 8; the feeding thread alone on photos of one bucket (two batches in flight).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s53
PYTHONPATH=/tmp/site:$N python3 -P benchmarks/upload.py --rounds 15 --mb 1.2,8.6,19.7
FACERUN_PHOTO_ITEMS=on row $N b16 models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch,gpu-photo-staged-batch --repeat 30
FACERUN_PHOTO_ITEMS=on row $N b16-2 models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-staged-batch,gpu-photo-batch --repeat 30
FACERUN_PHOTO_ITEMS=on row $N b8 models yunet-2023mar --sizes 1024x704,1280x736 --batch 8 --paths gpu-photo-batch,gpu-photo-staged-batch --repeat 30
PYTHONPATH=/tmp/site:$N python3 -P benchmarks/photo_batches.py .device/photos --batch 16 --buckets 1 --rounds 5
PYTHONPATH=/tmp/site:$N python3 -P benchmarks/photo_batches.py .device/photos --batch 8 --buckets 3 --rounds 5
