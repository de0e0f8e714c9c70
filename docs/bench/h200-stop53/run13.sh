# Stop 53's third call (issue 37): where the wall time of YuNet's rows from photos' bytes goes, sampled by py-spy
# (--idle: waits on the device counted too), split by the frames under each row's timed function (stacks.py).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s53
S=docs/bench/h200-stop53/stacks.py
spy() {  # label, marker, bench args
  label=$1; marker=$2; shift 2
  FACERUN_PHOTO_ITEMS=on /tmp/site/bin/py-spy record -r 1000 --idle -f raw -o /tmp/$label.txt -- \
    env PYTHONPATH=/tmp/site:$N FACERUN_CACHE=/tmp/cache-s53 python3 -P -c \
    "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench "$@" --json > /tmp/$label.json 2> /tmp/$label.err \
    || { echo "$label failed"; tail -5 /tmp/$label.err; }
  python3 docs/bench/h200-issue35/rows.py $label /tmp/$label.json | grep -v "peaks {"
  python3 $S /tmp/$label.txt "$marker" 22
}
spy b16 "_gpu_photo_batch.<locals>.run" models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo-batch --repeat 500 --budget 30
spy b8-1280 "_gpu_photo_batch.<locals>.run" models yunet-2023mar --sizes 1280x736 --batch 8 --paths gpu-photo-batch --repeat 500 --budget 30
spy b1 "_gpu_photo.<locals>.<lambda>" models yunet-2023mar --sizes 640x640 --paths gpu-photo --repeat 3000 --budget 30
