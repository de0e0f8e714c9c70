"""Sums of gpu_families.py --each lines by kernel and plan (the Winograd layers' three dispatches apart: input
transform, products, output transform), the share of the summed time each takes.
Usage: each_sum.py FILE ..."""
import collections
import sys

for path in sys.argv[1:]:
    sums, counts = collections.Counter(), collections.Counter()
    for line in open(path):
        parts = line.split()
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        kernel, ms = parts[2], float(parts[-1])
        plan = " ".join(parts[3:-2])[:40]
        key = f"{kernel} {plan}"
        sums[key] += ms
        counts[key] += 1
    total = sum(sums.values())
    print(f"{path}: {sum(counts.values())} dispatches, {total:.3f} ms summed")
    for key, ms in sums.most_common(30):
        print(f"  {ms:8.3f} ms {100 * ms / max(total, 1e-9):5.1f}%  x{counts[key]:<4d} {key}")
