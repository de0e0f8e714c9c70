"""The bench's paths by name: how each one runs a model (`facerun bench models`) or a folder of photos (`facerun bench
photos`). bench.py and photos.py only look paths up here, so a new path is one entry in MODEL_PATHS or PHOTO_PATHS.

A model path's `make(case, net)` returns (the function to time, the GPU program it runs or None), or raises Skip with
the reason it cannot run here. `case` is bench._Case: the input `x`, the batch input `xb`, `photo()` (the input as a
photo's bytes), `session(provider)` (an onnxruntime session), `names` (the outputs) and `sessions` (a per-model
cache); `net` is the loaded model, or for the -f16 paths the model loaded again at --precision f16.

A photo path's `row(job, embed_model)` runs the whole folder (photo_rows.PhotoJob) and returns its PhotoRow.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .. import agree
from ..errors import InputError
from . import photo_rows


class Skip(Exception):
    """A path that cannot run here; the message goes into the row's note."""


@dataclass(frozen=True)
class ModelPath:
    name: str
    make: Callable  # (case, net) -> (fn, program or None); raises Skip
    help: str
    batch: bool = False  # `--batch` items in one run, reported per face
    gpu: bool = False  # facerun's own GPU: needs net.gpu, and a run that fell back to the CPU is no GPU timing
    peer_gpu: bool = False  # another library on a GPU: judged at the GPU's tolerance, timed with the GPU rows
    half: bool = False  # on the model loaded again with its GPU at --precision f16
    photo: bool = False  # fed a photo's bytes: judged against the CPU on that photo's blob
    reference: bool = False  # the CPU interpreter itself, every other row's reference
    default: bool = False  # in `--paths`' default

    @property
    def on_device(self) -> bool:
        return self.gpu or self.peer_gpu

    @property
    def tolerance(self) -> float:
        # the GPU sums in another order (tiled sums, fused epilogues): 1e-3 of the range; f16 planes: 1e-2
        if self.half:
            return agree.GPU_F16_TOLERANCE
        return agree.GPU_TOLERANCE if self.on_device else agree.TOLERANCE

    @property
    def min_cosine(self) -> float:
        return agree.MIN_COSINE_F16 if self.half else agree.MIN_COSINE


# ---------------------------------------------------------------------------------------------- model paths


def _cpu(case, net):
    x = case.x
    return (lambda: net.run_cpu(x)), None


def _cpu_batch(case, net):
    xb = case.xb
    return (lambda: net.run_batch(xb, device="cpu")), None


def _gpu(case, net):
    x = case.x
    return (lambda: net.run(x)), net.program(x.shape)


def _gpu_photo(case, net):
    photo, shape = case.photo(), case.x.shape  # photo() first: its Skip says which models take photos
    photo_net = case.photo_net()
    for _ in range(2):  # as in _photo_batch: the layout checked, then the choice of candidate rows
        photo_net.run_photo(photo, shape)
    return (lambda: photo_net.run_photo(photo, shape)), photo_net.program(shape)


def _photo_batch(case):
    """The model as a library run loads it (so a batch runs in the bucket's batch program where FACERUN_PHOTO_ITEMS
    is on; the bench's own net has no photo layout: each photo its own pass), the batch's photos, their shapes and
    the bucket's, once the first photo has checked the device's layout, and then its choice of candidate rows (a
    library run's first photos do both before its batches choose rows)."""
    photo_net = case.photo_net()
    photos, shape = case.photos(), case.x.shape
    for _ in range(2):
        photo_net.run_photo(photos[0], shape)
    return photo_net, photos, [shape] * len(photos), shape


def _gpu_photo_batch(case, net):
    photo_net, photos, shapes, shape = _photo_batch(case)

    def run():
        return photo_net.submit_photos(photos, shapes, shape)()

    return run, photo_net.program(shape)


def _gpu_photo_staged_batch(case, net):
    # gpu-photo-batch with each photo first copied into the device's upload memory on a thread of its own, as a
    # library run's decoding threads stage theirs: the thread feeding the device then records copies, not uploads.
    # The staging is timed in (its wall time, the copies side by side).
    photo_net, photos, shapes, shape = _photo_batch(case)
    pool = ThreadPoolExecutor(8, thread_name_prefix="facerun-bench-stage")

    def run():
        staged = list(pool.map(photo_net.stage_photo, photos))
        return photo_net.submit_photos(staged, shapes, shape)()

    weakref.finalize(run, pool.shutdown, wait=False)  # the threads go with the row
    return run, photo_net.program(shape)


def _gpu_per_conv(case, net):
    x = case.x
    return (lambda: net.run_per_conv(x)), None


def _gpu_batch(case, net):
    xb = case.xb
    prog = net.program(xb.shape if net.batch_free else case.x.shape)
    return (lambda: net.run_batch(xb)), prog


def _ort(sess, feeds):
    from . import oracle

    return oracle.run(sess, feeds)  # looked up at each call (tests replace oracle.run)


def _onnxruntime(provider: str, batch: bool):
    def make(case, net):
        sess, feed = case.session(provider), net.input_name
        if not batch:
            x = case.x
            return (lambda: _ort(sess, {feed: x})), None
        xb = case.xb
        if net.batch_free:
            return (lambda: _ort(sess, {feed: xb})), None
        names = case.names

        def items():  # a file fixed at batch 1 runs item by item, as facerun's run_batch does
            outs = [_ort(sess, {feed: xb[i:i + 1]}) for i in range(xb.shape[0])]
            return {n: np.concatenate([o[n] for o in outs]) for n in names}

        return items, None

    return make


def _torch(name: str, batch: bool):
    def make(case, net):
        from . import torch_peer

        try:
            fn = torch_peer.bench_runner(case.net, name, case.x, case.xb if batch else None, case.names,
                                         case.sessions)
        except torch_peer.Skipped as e:
            raise Skip(str(e)) from None
        return fn, None

    return make


_TORCH_HELP = ("facerun's program run eagerly by torch on CUDA (cuDNN), {}: the native GPU peer")

MODEL_PATHS: dict[str, ModelPath] = {p.name: p for p in (
    ModelPath("cpu", _cpu, "the numpy interpreter, batch 1: the reference for time and parity", reference=True,
              default=True),
    ModelPath("cpu-batch", _cpu_batch, "the interpreter on --batch items", batch=True),
    ModelPath("gpu-per-conv", _gpu_per_conv, "each convolution alone on the GPU, the rest on the CPU", gpu=True,
              default=True),
    ModelPath("gpu", _gpu, "the whole program on the GPU, batch 1", gpu=True, default=True),
    ModelPath("gpu-photo", _gpu_photo, "YuNet from a photo's bytes, laid out on the GPU, its heads' candidate rows "
              "read back (as detect runs it)",
              gpu=True, photo=True),
    ModelPath("gpu-photo-batch", _gpu_photo_batch, "YuNet from --batch photos' bytes in one submission, per photo "
              "(as a library run's batches of one bucket, its heads' candidate rows read back)", batch=True, gpu=True,
              photo=True),
    ModelPath("gpu-photo-staged-batch", _gpu_photo_staged_batch, "gpu-photo-batch with the photos first copied into "
              "the device's upload memory by 8 threads (as a library run's decoding threads do), timed in",
              batch=True, gpu=True, photo=True),
    ModelPath("gpu-batch", _gpu_batch, "--batch items in one GPU submission, per face", batch=True, gpu=True,
              default=True),
    ModelPath("gpu-f16", _gpu, "gpu at --precision f16", gpu=True, half=True),
    ModelPath("gpu-batch-f16", _gpu_batch, "gpu-batch at --precision f16", batch=True, gpu=True, half=True),
    ModelPath("onnxruntime", _onnxruntime("cpu", False), "onnxruntime's CPU provider: the outside peer",
              default=True),
    ModelPath("onnxruntime-batch", _onnxruntime("cpu", True), "onnxruntime on --batch items", batch=True),
    ModelPath("onnxruntime-webgpu", _onnxruntime("webgpu", False), "onnxruntime's WebGPU execution provider",
              peer_gpu=True),
    ModelPath("onnxruntime-webgpu-batch", _onnxruntime("webgpu", True), "the same on --batch items", batch=True,
              peer_gpu=True),
    ModelPath("torch-cuda", _torch("torch-cuda", False), _TORCH_HELP.format("TF32 on"), peer_gpu=True),
    ModelPath("torch-cuda-batch", _torch("torch-cuda-batch", True), _TORCH_HELP.format("TF32 on, --batch items"),
              batch=True, peer_gpu=True),
    ModelPath("torch-cuda-strict", _torch("torch-cuda-strict", False), _TORCH_HELP.format("strict fp32"),
              peer_gpu=True),
    ModelPath("torch-cuda-strict-batch", _torch("torch-cuda-strict-batch", True),
              _TORCH_HELP.format("strict fp32, --batch items"), batch=True, peer_gpu=True),
)}


# ---------------------------------------------------------------------------------------------- photo paths


@dataclass(frozen=True)
class PhotoPath:
    name: str
    row: Callable  # (photo_rows.PhotoJob, embed model or None) -> photo_rows.PhotoRow
    help: str
    embeds: bool = True  # with --embed, a second row PATH+embed: the whole job
    reference: bool = False  # may be the row whose faces every other row is compared with (the first such one)
    default: bool = False
    floor: bool = False  # decoding alone: no faces to compare; every row's vs_decode is against the faster one


def _library(device: str, serial: bool = False, decoders: str | None = None):
    name = device + ("-serial" if serial else "") + ("-decoder-processes" if decoders == "processes" else "")
    return lambda job, embed: photo_rows.facerun_row(job, name, device, embed, serial, decoders)


def _processes(device: str):
    return lambda job, embed: photo_rows.processes_row(job, f"{device}-processes", device, embed)


PHOTO_PATHS: dict[str, PhotoPath] = {p.name: p for p in (
    PhotoPath("cpu", _library("cpu"), "the pipelined library run on the CPU", reference=True, default=True),
    PhotoPath("gpu", _library("gpu"), "the pipelined library run on the GPU", default=True),
    PhotoPath("cpu-serial", _library("cpu", serial=True), "the same work one photo after another", reference=True),
    PhotoPath("gpu-serial", _library("gpu", serial=True), "the same on the GPU"),
    PhotoPath("cpu-decoder-processes", _library("cpu", decoders="processes"),
              "the pipelined run decoding in a process per core into shared memory (start-up timed in)"),
    PhotoPath("gpu-decoder-processes", _library("gpu", decoders="processes"), "the same on the GPU"),
    PhotoPath("decode", lambda job, embed: photo_rows.decode_row(job), "decoding alone over --workers threads, as "
              "the library decodes (the floor)", embeds=False, floor=True),
    PhotoPath("decode-processes", lambda job, embed: photo_rows.decode_row(job, processes=True),
              "decoding alone in a process per core into shared memory (start-up not timed)", embeds=False,
              floor=True),
    PhotoPath("cpu-processes", _processes("cpu"), "the library run over --processes processes, start-up timed in"),
    PhotoPath("gpu-processes", _processes("gpu"), "the same on the GPU"),
    PhotoPath("opencv", lambda job, embed: photo_rows.opencv_row(job.photos, job.detector_model, 1),
              "cv2.FaceDetectorYN on the same decoded photos, its own threads inside", embeds=False, default=True),
    PhotoPath("opencv-threads",
              lambda job, embed: photo_rows.opencv_row(job.photos, job.detector_model, job.opencv_threads),
              "the same, a photo per thread over the cores, or --workers threads", embeds=False),
)}


def check_names(names, registry: dict, what: str = "path") -> None:
    """One line naming the unknown ones and the known ones."""
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InputError(f"unknown {what} {', '.join(unknown)} (paths: {', '.join(registry)})")


def split(text: str) -> tuple[str, ...]:
    """'cpu, gpu,' -> ('cpu', 'gpu')."""
    return tuple(p.strip() for p in text.split(",") if p.strip())
