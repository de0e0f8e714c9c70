# Stop 57's last ask, with little device time left (about a minute of run): YuNet at 40 and 31 dispatches, batch 16
# and a photo at 640x640 (the heads a pass a stride against stop 56), in turn.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for t in s56 s57 s57 s56; do
  row $PWD/.device/$t b16-$t models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch,gpu-photo --repeat 20 \
    --roofline
done
echo "elapsed $SECONDS s"
