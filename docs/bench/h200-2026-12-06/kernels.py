"""The kernel families of a saved `bench models --by-kernel --json`: one line a family."""
import json
import sys

label, path = sys.argv[1], sys.argv[2]
for k in json.load(open(path)).get("kernels", []):
    if "error" in k:
        print(f"{label:>16} {k['model']} {k['path']} error {k['error']}")
        continue
    print(f"{label:>16} {k['model']} {k['size']} {k['path']} b{k['batch']}: {k['dispatches']} dispatches, pass "
          f"{k['pass_ms']:.3f} ms, run {k['run_ms']:.3f} ms")
    for f in k["families"]:
        lim = f.get("of_limit")
        print(f"{'':>18}{f['family']:>18} {f['dispatches']:3d} disp {f['ms']:7.3f} ms {100 * (f['share'] or 0):5.1f}%"
              f" {f['gflop']:7.3f} GFLOP {f['mib']:8.1f} MiB {f.get('bound', '')} "
              f"{'' if lim is None else f'{100 * lim:.1f}% of limit'}")
