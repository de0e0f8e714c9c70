"""Where a timed loop's wall time goes, from py-spy's raw samples (`py-spy record --idle -f raw`): the samples whose
stack passes through MARKER (a function name), split by the frames under it, inclusive and by leaf.
Usage: stacks.py FILE MARKER [TOP]"""
import collections
import sys

path, marker = sys.argv[1], sys.argv[2]
top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
inclusive, leaf = collections.Counter(), collections.Counter()
total = 0
for line in open(path):
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not count.isdigit():
        continue
    frames = stack.split(";")
    # "Class.method (path/file.py:line)" -> "Class.method file.py": a function's lines counted together
    names = [f.split(" (")[0] + " " + f.split(" (")[1].split(":")[0].split("/")[-1] if " (" in f else f
             for f in frames]
    at = next((i for i, n in enumerate(names) if n.split(" ")[0] == marker or n.split(" ")[0].endswith("." + marker)),
              None)
    if at is None:
        continue
    n = int(count)
    total += n
    for name in set(names[at + 1:]):
        inclusive[name] += n
    leaf[names[-1]] += n
print(f"{total} samples under {marker}")
print("inclusive (share of those samples):")
for name, n in inclusive.most_common(top):
    print(f"  {100 * n / max(total, 1):5.1f}%  {name}")
print("leaf:")
for name, n in leaf.most_common(top):
    print(f"  {100 * n / max(total, 1):5.1f}%  {name}")
