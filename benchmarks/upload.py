"""Photos' bytes up to the device, step by step: where the time of a batch row from photos' bytes goes (issue 37:
YuNet 640x640 batch 16 from photos' bytes takes 6.9 ms, of which 2.4 ms are its kernels).

    python benchmarks/upload.py [--mb 1.2,4.9,19.7] [--rounds 15] [--piece-mb 8]

For each size (19.7 MB: sixteen 640x640 RGB photos; 1.2 MB: one), the median over --rounds of, in ms and GB/s:
- `write_buffer`: `queue.write_buffer` alone, the call that `gpu-photo-batch` makes (wgpu copies the bytes into
  staging memory of its own on this thread);
- `in pieces`: `queue.write_buffer` in writes of --piece-mb MiB (`gpu.staging.write_pieces`, how a program's input
  larger than FACERUN_UPLOAD_PIECE_MB goes up);
- `write_buffer + run`: the same (one write), then an empty submission carrying it, waited for (a 16-byte
  read-back): the bytes on the device;
- `mapped write`: the copy into a mapped MAP_WRITE | COPY_SRC buffer (`write_mapped`; a library run's decoding threads
  copy so with numpy, gpu/staging.py);
- `mapped + copy + run`: then unmap, copy_buffer_to_buffer into a storage buffer, submit, wait, map again;
- `device copy`: copy_buffer_to_buffer between two storage buffers on the device, waited for;
- `read back`: the other way, as a run's outputs come back: a copy into a MAP_READ buffer, submitted, the buffer
  mapped and its bytes copied out (`read_mapped`), unmapped;
- `wait only`: an empty submission and the 16-byte read-back, the fixed cost in every row above.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", default="1.2,4.9,19.7", help="sizes in MB (10^6 bytes), comma-separated")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--piece-mb", type=float, default=8.0, help="the `in pieces` column's writes, MiB")
    args = ap.parse_args(argv)
    import wgpu

    from facerun.errors import FacerunError
    from facerun.gpu.device import get_device
    from facerun.gpu.readback import read

    try:
        dev = get_device()
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    device, queue = dev.device, dev.queue
    U = wgpu.BufferUsage
    tail = device.create_buffer(size=256, usage=U.MAP_READ | U.COPY_DST)
    mark = device.create_buffer(size=256, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)

    def done(enc=None) -> None:
        """Submit `enc` (or nothing) with a 16-byte copy, and wait for it through the read-back."""
        enc = enc or device.create_command_encoder()
        enc.copy_buffer_to_buffer(mark, 0, tail, 0, 16)
        queue.submit([enc.finish()])
        read(device, tail, nbytes=16)

    print(f"uploads on {dev.label}; medians of {args.rounds} rounds, ms (GB/s)")
    print(f"{'MB':>6} {'write_buffer':>16} {'in pieces':>16} {'write_buffer + run':>20} {'mapped write':>16} "
          f"{'mapped + copy + run':>20} {'device copy':>16} {'read back':>16} {'wait only':>10}")
    for mb in (float(x) for x in args.mb.split(",")):
        n = int(mb * 1e6) // 4 * 4
        data = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
        dst = device.create_buffer(size=n, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
        other = device.create_buffer(size=n, usage=U.STORAGE | U.COPY_DST)
        stage = device.create_buffer(size=n, usage=U.MAP_WRITE | U.COPY_SRC, mapped_at_creation=True)
        stage.unmap()
        back = device.create_buffer(size=n, usage=U.MAP_READ | U.COPY_DST)
        piece = int(args.piece_mb * 2**20) // 4 * 4
        times: dict[str, list[float]] = {k: [] for k in ("write", "pieces", "write_run", "mapped", "mapped_run", "copy",
                                                          "back", "wait")}
        for r in range(args.rounds + 2):  # two untimed rounds first
            t = time.perf_counter()
            queue.write_buffer(dst, 0, data)
            t1 = time.perf_counter()
            done()
            t2 = time.perf_counter()
            for start in range(0, n, piece):
                queue.write_buffer(dst, start, data[start : start + piece])
            t2a = time.perf_counter()
            done()
            stage.map_sync(wgpu.MapMode.WRITE)
            t3 = time.perf_counter()
            stage.write_mapped(data)
            t4 = time.perf_counter()
            stage.unmap()
            enc = device.create_command_encoder()
            enc.copy_buffer_to_buffer(stage, 0, dst, 0, n)
            done(enc)
            t5 = time.perf_counter()
            enc = device.create_command_encoder()
            enc.copy_buffer_to_buffer(dst, 0, other, 0, n)
            t6 = time.perf_counter()
            done(enc)
            t7 = time.perf_counter()
            done()
            t8 = time.perf_counter()
            enc = device.create_command_encoder()
            enc.copy_buffer_to_buffer(dst, 0, back, 0, n)
            queue.submit([enc.finish()])
            back.map_sync(wgpu.MapMode.READ)
            got = np.frombuffer(back.read_mapped(), np.uint8)
            back.unmap()
            t9 = time.perf_counter()
            if got.size != n or got[n // 2] != data[n // 2]:
                print("error: the bytes read back are not the bytes written", file=sys.stderr)
                return 1
            if r >= 2:
                times["write"].append(t1 - t)
                times["write_run"].append(t2 - t)
                times["pieces"].append(t2a - t2)
                times["mapped"].append(t4 - t3)
                times["mapped_run"].append(t5 - t3)
                times["copy"].append(t7 - t6)
                times["wait"].append(t8 - t7)
                times["back"].append(t9 - t8)

        def cell(key: str, width: int, times=times, n=n) -> str:
            s = statistics.median(times[key])
            return f"{s * 1e3:.3f} ({n / s / 1e9:.1f})".rjust(width)

        wait = statistics.median(times["wait"]) * 1e3
        print(f"{mb:>6.1f} {cell('write', 16)} {cell('pieces', 16)} {cell('write_run', 20)} {cell('mapped', 16)} "
              f"{cell('mapped_run', 20)} {cell('copy', 16)} {cell('back', 16)} {wait:>10.3f}")
        for b in (dst, other, stage, back):
            b.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
