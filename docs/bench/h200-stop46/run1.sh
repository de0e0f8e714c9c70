# call 1 of stop 46, 4120 photos, one call, trees alternating: before (.device/before = 55f3d89, stop 45's feeding in
# input order over 8 threads), head (.device/head = 517bffd, stop 45 as landed) and the working tree (photos staged
# on the device by the decoding threads, FACERUN_PHOTO_STAGING_MB; 0 turns it off); batch 8 and batch 1; decoder
# processes; the floor; then where the feeding thread waits (py-spy --idle)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
export FACERUN_PHOTO_BATCH=8
for round in 1 2; do
  row $PWD/.device/before before-b8-$round photos /tmp/p20 --paths gpu
  row $PWD/.device/head head-b8-$round photos /tmp/p20 --paths gpu
  row $PWD staged-b8-$round photos /tmp/p20 --paths gpu
done
FACERUN_PHOTO_STAGING_MB=0 row $PWD unstaged-b8 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BATCH=1 row $PWD/.device/head head-b1 photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BATCH=1 row $PWD staged-b1 photos /tmp/p20 --paths gpu
row $PWD staged-b8-procs photos /tmp/p20 --paths gpu-decoder-processes
row $PWD/.device/head head-b8-procs photos /tmp/p20 --paths gpu-decoder-processes
row $PWD staged-b8-206 photos $P --paths gpu
FACERUN_PHOTO_BATCH=1 row $PWD staged-b1-206 photos $P --paths gpu
row $PWD floor photos /tmp/p20 --paths decode,decode-processes
# issue 37's photo sizes, fed as a library run feeds them (photos' bytes, batch 8) against the float blob
row $PWD yunet-sizes models yunet-2023mar --sizes 640x480,1024x704,1280x736 --batch 8 \
  --paths gpu-photo,gpu-photo-batch,gpu-batch --repeat 20 --budget 2 --roofline
row $PWD yunet-640 models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo,gpu-photo-batch,gpu-batch \
  --repeat 20 --budget 2 --roofline
