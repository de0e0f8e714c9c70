"""One line per bench row: label, model (or photos), path, the median ms (models) or photos/s (photos), and what else
matters for the row (parity; faces, checks, the floor ratio and the feeding thread's ms a photo by phase)."""
import json
import sys

label, path = sys.argv[1], sys.argv[2]
data = json.load(open(path))
peaks = (data.get("device") or {}).get("peaks")
if peaks:
    print(f"{label:>16} peaks {peaks}")
for r in data["rows"]:
    if r.get("skipped"):
        print(f"{label:>16} {r.get('model', 'photos'):>14} {r['path']:>22} skipped: {r['skipped'][:90]}")
    elif "photos_per_s" in r:
        s = r.get("seconds", {})
        n = max(1, r.get("photos") or 1)
        feed = s.get("feeding")
        phases = s.get("phases") or {}
        top = sorted(phases.items(), key=lambda kv: -kv[1])[:5]
        ph = " ".join(f"{k} {1000 * v / n:.2f}" for k, v in top if v)
        vs = r.get("vs_decode")
        print(f"{label:>16} {'photos':>14} {r['path']:>22} {r['photos_per_s']:8.1f}/s"
              f"{'' if vs is None else f' vs_decode {vs:.2f}'} photos {r.get('photos')} faces {r.get('faces')} "
              f"first {r.get('first_photo_ms') or 0:.0f} ms checks {r.get('gpu_checks')}{f"+{r['gpu_checks_kept']}kept" if r.get('gpu_checks_kept') else ''}{f" dec {r['decoders']}" if r.get('decoders') not in (None, '', 'threads') else ''} agree {(r.get('agree_with_cpu') or {}).get('same')}"
              f" batches {r.get('photo_item_batches', '-')}/{r.get('photo_run_batches', '-')} programs {r.get('programs_compiled')}"
              f" staged {r.get('photos_staged', '-')}/{r.get('photos_unstaged', '-')}"
              f"{'' if feed is None else f' | feeding {1000 * feed / n:.2f} ms/photo: {ph}'}")
        waits = s.get("waiting")
        if waits and feed is not None:
            print(f"{'':>16} waiting on " + " ".join(f"{k} {1000 * v / n:.2f}" for k, v in waits.items()) + " ms/photo")
        if r.get("bottleneck") and r.get("faces"):
            print(f"{'':>16} {r['bottleneck']}")
        if r.get("after_first_per_s") and not r.get("floor"):
            print(f"{'':>16} after the first photo: {r['after_first_per_s']:.1f}/s")
    elif r.get('median_ms') is None:
        print(f"{label:>16} {r.get('model', ''):>14} {r['path']:>22} no timing: {str(r.get('note'))[:90]}")
    else:
        extra = ""
        if r.get("tflops") is not None:
            extra = f" {r['tflops']:.2f} TFLOP/s {r.get('gbps') or 0:.0f} GB/s"
            if r.get("of_fma_peak") is not None:
                extra += f" ({100 * r['of_fma_peak']:.0f}% fma, {100 * (r.get('of_bandwidth_peak') or 0):.0f}% bw)"
        if r.get("device_ms") is not None:  # rows of later trees: the program alone on the device
            extra += f" | device {r['device_ms']:.3f} ms ({100 * (r.get('device_of_limit') or 0):.1f}% of limit)"
        print(f"{label:>16} {r.get('model', ''):>14} {r.get('size', ''):>9} {r['path']:>22} b{r.get('batch', 1):<3}"
              f" {r.get('median_ms', float('nan')):8.3f} ms (p10 {r.get('p10_ms') or 0:.3f} p90 {r.get('p90_ms') or 0:.3f})"
              f" ok {r.get('ok')}{extra}")
