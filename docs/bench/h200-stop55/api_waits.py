"""From py-spy's raw samples taken with --native (run22.sh): the feeding thread's samples (those under MARKER) in
each wgpu-py API call, how many of them wait to take the interpreter lock back (pthread_cond_timedwait under
cffi's call), and where those calls were made from.
Usage: api_waits.py FILE [MARKER]"""
import collections
import sys

path = sys.argv[1]
marker = sys.argv[2] if len(sys.argv) > 2 else "_pipelined"
total = 0
inside, waiting, callers = collections.Counter(), collections.Counter(), collections.Counter()
for line in open(path):
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not count.isdigit():
        continue
    frames = stack.split(";")
    if not any(f.startswith(marker + " ") for f in frames):
        continue
    n = int(count)
    total += n
    api = [i for i, f in enumerate(frames) if "_api.py" in f]
    if not api:
        continue
    name = frames[api[-1]].split(" (")[0]
    inside[name] += n
    if any("cdata_call" in f for f in frames[api[-1]:]) and "pthread_cond_timedwait" in stack:
        waiting[name] += n
    caller = frames[api[0] - 1].split(" (")[0] + ":" + frames[api[0] - 1].rsplit(":", 1)[-1].rstrip(")")
    callers[(name, caller)] += n
print(f"{total} samples under {marker}")
print("wgpu-py API call: share of the samples, of which waiting to take the lock back")
for name, n in inside.most_common(12):
    print(f"  {100 * n / total:5.1f}%  {100 * waiting[name] / total:5.1f}%  {name}")
print("made from:")
for (name, caller), n in callers.most_common(14):
    print(f"  {100 * n / total:5.1f}%  {name} <- {caller}")
