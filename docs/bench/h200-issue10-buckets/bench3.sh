# call 4: OpenCV a photo per thread beside; processes, bucket 128 (new) against 32 (a program per padded size, as before), OpenCV beside
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
  row gpu-$round --photos $P --paths gpu
  row cv-$round --photos $P --paths opencv
  row cvt-$round --photos $P --paths opencv-threads
done
row gpu-p20 --photos /tmp/p20 --paths gpu
row cvt-p20 --photos /tmp/p20 --paths opencv-threads
for n in 4 6 8; do row procs$n-p20 --photos /tmp/p20 --paths gpu-processes --processes $n; done
row gpu-embed --photos $P --paths cpu,gpu --embed .device/models/MobileFaceNet.onnx
