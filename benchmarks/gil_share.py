"""Who holds the interpreter lock in a library run: a summary of `py-spy record --gil --threads --format raw`.

    py-spy record --gil --threads -r 250 --format raw -o gil.txt -- facerun bench photos DIR --paths gpu
    python benchmarks/gil_share.py gil.txt --rate 250 --photos 4120

Each sample is the one thread holding the lock at that moment (--gil), so the samples of a thread's role (decoding
threads, post-processing threads, the thread feeding the network, the rest) are its share of the lock; with the
rate and the photo count they are milliseconds of lock a photo. Prints each role's share, then per role the facerun
functions the lock was held under (inclusive), the leaves it was held in (self) and the innermost facerun line.
Recorded with --idle instead of --gil, the samples are every thread's whole time, waits included (where a thread
waits is its innermost facerun line).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict

ROLES = (("facerun-decode", "decode"), ("facerun-post", "post"), ("facerun-embed", "embed"), ("MainThread", "feeding"))
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:()]+)(?P<line>:\d+)?\)$")


def role_of(thread: str) -> str:
    name = thread.split(": ", 1)[-1]
    return next((role for prefix, role in ROLES if name.startswith(prefix)), re.sub(r"[_-]?\d+$", "", name))


def parse(lines):
    """(role, frames outermost first, samples) for each line of py-spy's raw (collapsed) output."""
    for line in lines:
        line = line.rstrip("\n")
        if not line or " " not in line:
            continue
        stack, _, count = line.rpartition(" ")
        parts = stack.split(";")
        yield role_of(parts[0]), parts[1:], int(count)


def short(frame: str, line: bool = False) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    keep = path.split("facerun/", 1)[-1] if "facerun/" in path else path.rsplit("/", 1)[-1]
    where = (m.group("line") or "") if line else ""
    return f"{m.group('func')} ({keep}{where})"


def summary(lines, rate: float, photos: int, top: int = 10) -> str:
    roles: Counter = Counter()
    inclusive: dict[str, Counter] = defaultdict(Counter)
    leaves: dict[str, Counter] = defaultdict(Counter)
    innermost: dict[str, Counter] = defaultdict(Counter)  # the innermost facerun frame, with its line
    for role, frames, n in parse(lines):
        roles[role] += n
        for f in {short(f) for f in frames if "facerun/" in f}:
            inclusive[role][f] += n
        if frames:
            leaves[role][short(frames[-1])] += n
        ours = [f for f in frames if "facerun/" in f]
        if ours:
            innermost[role][short(ours[-1], line=True)] += n
    total = sum(roles.values())
    if not total:
        return "no samples"

    def ms(n: int) -> str:
        return f"{n / rate / photos * 1e3:6.3f} ms/photo" if photos else f"{n / rate:7.2f} s"

    out = [f"{total} samples holding the lock ({total / rate:.1f} s at {rate:g}/s)"
           + (f", {photos} photos" if photos else "")]
    for role, n in roles.most_common():
        out.append(f"  {role:<12} {100 * n / total:5.1f}%  {ms(n)}")
    for role, n in roles.most_common(4):
        out.append(f"== {role}: under (inclusive; the frames under nearly all of its samples left out)")
        under = [(f, c) for f, c in inclusive[role].most_common() if c < 0.98 * n][:top]
        out += [f"  {100 * c / total:5.1f}%  {ms(c)}  {f}" for f, c in under]
        out.append(f"== {role}: in (self)")
        out += [f"  {100 * c / total:5.1f}%  {ms(c)}  {f}" for f, c in leaves[role].most_common(top)]
        out.append(f"== {role}: at (the innermost facerun line)")
        out += [f"  {100 * c / total:5.1f}%  {ms(c)}  {f}" for f, c in innermost[role].most_common(top)]
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", help="py-spy record --format raw output")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's sampling rate (-r)")
    parser.add_argument("--photos", type=int, default=0, help="photos in the run: shares as ms a photo")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        with open(args.raw) as f:
            print(summary(f, args.rate, args.photos, args.top))
    except OSError as e:
        print(f"gil_share: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
