# Stop 54's fourth call (issue 37): where YuNet's batch of 16 from photos' bytes spends its wall time now (candidate
# rows, split in two submissions; py-spy, split by frames under the timed loop), beside the device's own time.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s54
S=docs/bench/h200-stop53/stacks.py
row $N device models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-batch --roofline --repeat 30
FACERUN_PHOTO_ITEMS=on /tmp/site/bin/py-spy record -r 1000 --idle -f raw -o /tmp/b16.txt -- \
  env PYTHONPATH=/tmp/site:$N FACERUN_CACHE=/tmp/cache-s54 python3 -P -c \
  "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench models yunet-2023mar --sizes 640x640 \
  --batch 16 --paths gpu-photo-batch --repeat 500 --budget 20 --json > /tmp/json/b16.json 2> /tmp/json/b16.err
python3 docs/bench/h200-issue35/rows.py b16 /tmp/json/b16.json
python3 $S /tmp/b16.txt "_gpu_photo_batch.<locals>.run" 40
