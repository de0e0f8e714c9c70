# the calls' shared part: the Vulkan loader and wheels, the 4120-photo folder (hard links), and row TREE LABEL ARGS...
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
# the trees carried packed (.device/trees.tar.gz: s55, s56, ...), to keep the carry under 64 MiB
[ -f .device/trees.tar.gz ] && tar -xzf .device/trees.tar.gz -C .device
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -d /tmp/site/wgpu ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export FACERUN_MODELS=$PWD/facerun/zoo/data PYTHONUNBUFFERED=1 COLUMNS=200
unset FACERUN_JPEG
P=.device/photos
mkdir -p /tmp/p20 && for i in $(seq 20); do [ -d /tmp/p20/r$i ] || cp -al $PWD/$P /tmp/p20/r$i; done
row() {  # tree, label, then bench args: one line per row, the JSON kept in /tmp/json
  tree=$1; label=$2; shift 2
  mkdir -p /tmp/json
  PYTHONPATH=/tmp/site:$tree FACERUN_CACHE=/tmp/cache-$(basename $tree) \
    python3 -P -c "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench "$@" --json \
    > /tmp/json/$label.json 2> /tmp/json/$label.err || { echo "$label failed"; tail -3 /tmp/json/$label.err; return; }
  python3 docs/bench/h200-issue35/rows.py $label /tmp/json/$label.json
}
profile() {  # tree: the 4120-photo detect under py-spy (native frames), where the feeding thread's time goes
  tree=$1
  /tmp/site/bin/py-spy record -r 500 --idle --native -f raw -o /tmp/lib.txt -- \
    env PYTHONPATH=/tmp/site:$tree FACERUN_CACHE=/tmp/cache-$(basename $tree) python3 -P -c \
    "import sys; from facerun.cli import main; sys.argv[0]='facerun'; main()" bench photos /tmp/p20 --paths gpu \
    --json > /tmp/json/lib.json 2> /tmp/json/lib.err
  python3 docs/bench/h200-issue35/rows.py lib /tmp/json/lib.json
  python3 docs/bench/h200-stop53/stacks.py /tmp/lib.txt _pipelined 40
  python3 docs/bench/h200-stop55/api_waits.py /tmp/lib.txt
  gzip -c /tmp/lib.txt > $OUT/lib-spy.txt.gz
}
