# the three calls' shared part: env, the 4120-photo folder (hard links), and row LABEL ARGS... (one line per row, JSON kept in $OUT)
source docs/bench/h200-issue10-buckets/env.sh
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
