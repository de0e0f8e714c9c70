"""A run's command buffer made through wgpu-py's API against replay.Encoder (wgpu-native's calls, the interpreter
lock held), while other threads want the lock: what a library run's feeding thread pays to make, record, finish and
release a photo's commands (submitting is left out: it would run them).

    python benchmarks/encoder_calls.py [--threads 0,6] [--runs 300] [--size 160x128]

The pass recorded is YuNet 2023mar's at --size through its replay list (the same calls either way); the other
threads each run ~50 µs of Python, then wait half a millisecond outside the lock (gil_calls.busy_threads). Prints ms a
command buffer, medians of alternating rounds. Runs on any adapter (FACERUN_ALLOW_SOFTWARE=1 for lavapipe).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from gil_calls import busy_threads  # benchmarks/ is the script's folder, first on sys.path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="0,6", help="counts of busy threads beside, comma-separated")
    parser.add_argument("--runs", type=int, default=300, help="command buffers a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", default="160x128", help="YuNet's input, WxH")
    args = parser.parse_args(argv)
    import facerun
    from facerun.gpu import replay
    from facerun.gpu.model import GpuModel

    w, h = (int(v) for v in args.size.split("x"))
    prog = facerun.load("yunet-2023mar").program((1, 3, h, w))
    gp = GpuModel().compile(prog)
    native = gp.native
    if native is None:
        print("encoder_calls: this wgpu-py records through its API only (FACERUN_GPU_REPLAY)", file=sys.stderr)
        return 1
    device = gp.dev.device

    def api():
        enc = device.create_command_encoder(label="api")
        gp.encode_pass(enc)
        enc.finish()

    def held():
        enc = replay.Encoder(native, device)
        gp.encode_pass(enc)
        enc.finish().release()

    def per_run(f) -> float:
        start = time.perf_counter()
        for _ in range(args.runs):
            f()
        return (time.perf_counter() - start) / args.runs * 1e3

    print(f"YuNet {w}x{h}, {len(gp.replay.steps)} dispatches a pass, on {gp.dev.name}")
    print(f"{'busy threads':>12} {'API ms':>8} {'native, lock held ms':>21} {'ratio':>6}")
    for count in (int(t) for t in args.threads.split(",")):
        a, b = [], []
        with busy_threads(count):
            for _ in range(args.rounds):
                a.append(per_run(api))
                b.append(per_run(held))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{count:>12} {ma:>8.3f} {mb:>21.3f} {ma / mb:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
