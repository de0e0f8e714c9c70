# call 2: the library benchmark, bucket 128 (new) against 32 (a program per padded size, as before), OpenCV beside
source .device/env.sh
[ -d /tmp/site ] || { echo "no /tmp/site: run setup first"; exit 1; }
unset FACERUN_JPEG  # libjpeg-turbo when simplejpeg is installed
P=.device/photos
mkdir -p /tmp/p20 && for i in $(seq 20); do [ -d /tmp/p20/r$i ] || cp -al $PWD/$P /tmp/p20/r$i; done
row() {  # label, then bench args; prints one line per row and keeps the JSON
  label=$1; shift
  facerun bench --json "$@" > $OUT/$label.json 2> $OUT/$label.err || { echo "$label failed"; tail -3 $OUT/$label.err; return; }
  python3 - "$label" $OUT/$label.json <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
for r in d["rows"]:
    if r.get("skipped"):
        print(sys.argv[1], r["path"], "skipped", r["skipped"]); continue
    s = r["seconds"]
    print(f'{sys.argv[1]:>14} {r["path"]:>13} photos {r["photos"]} faces {r["faces"]} sizes {r["distinct_sizes"]} '
          f'{r["photos_per_s"]:.1f}/s first {r["first_photo_ms"]:.0f} ms checks {r["gpu_checks"]} '
          f'gpu_progs {r["gpu_programs_compiled"]} agree {r["agree_with_cpu"]} total {s["total"]:.2f}s | {r["bottleneck"]}')
PY
}
for round in 1 2; do
  FACERUN_PHOTO_BUCKET=128 row b128-$round --photos $P --paths gpu
  FACERUN_PHOTO_BUCKET=32 row b32-$round --photos $P --paths gpu
  row cv-$round --photos $P --paths opencv
done
FACERUN_PHOTO_BUCKET=128 row b128-p20 --photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BUCKET=32 row b32-p20 --photos /tmp/p20 --paths gpu
FACERUN_PHOTO_BUCKET=128 row b128-p20x4 --photos /tmp/p20 --paths gpu-processes --processes 4
FACERUN_PHOTO_BUCKET=128 row b128-embed --photos $P --paths cpu,gpu --embed .device/models/MobileFaceNet.onnx
FACERUN_PHOTO_BUCKET=128 row b128-agree --photos $P --paths cpu,gpu
