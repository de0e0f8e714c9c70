"""facerun's one wgpu device: created lazily on first use, thread-safe, given up for good after a device failure.

Switches (read when the device is first needed):
  FACERUN_GPU=off                  no GPU at all
  FACERUN_GPU_BACKEND=vulkan|metal|dx12|gl|off   which backend to enumerate (default: the platform's primary one)
  FACERUN_GPU_ADAPTER=<substring>  pick the adapter whose name contains it
  FACERUN_GPU_ADAPTER=#N           pick the N-th hardware adapter (from 0, software adapters not counted, or only
                                   those when there is no other), in the backend's order: what a Ray actor given
                                   GPU N sets, since Vulkan ignores CUDA_VISIBLE_DEVICES
  FACERUN_ALLOW_SOFTWARE=1         accept software adapters (llvmpipe/lavapipe, WARP, SwiftShader); the CPU path is
                                   faster than those, so they are skipped by default (`allow_software(True)` = the
                                   CLI's --allow-software)
  FACERUN_GPU_INJECT_FAILURE=submit|readback   tests: make the next submission (or read-back) fail
  FACERUN_GPU_CHECKED=1            compile every kernel with the shader compiler's bounds checks (the tests' build);
                                   by default kernels whose indexing the planner keeps in range are compiled trusted

wgpu-py has no error scopes: errors of API calls arrive as exceptions (GPUValidationError, GPUOutOfMemoryError),
and errors the device reports later (at submit, device lost) only through the "wgpu" logger. A logging handler
watches that logger; any such error marks the device broken, with the reason, and every later use raises GpuError.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import counters, settings
from ..errors import GpuError
from . import kernels
from .plan import Limits

log = logging.getLogger("facerun.gpu")

# What a device must offer for facerun's kernels (the WebGPU defaults meet them).
NEEDS = {
    "max-storage-buffers-per-shader-stage": 6,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-storage-size": 16384,
}
# Limits asked of the device at the adapter's own (usually larger) values.
TAKE_LIMITS = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroups-per-dimension",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-storage-buffers-per-shader-stage",
    "max-uniform-buffer-binding-size",
)
BACKENDS = {"vulkan": "Vulkan", "metal": "Metal", "dx12": "DX12", "gl": "GL"}
SOFTWARE_NAMES = ("llvmpipe", "lavapipe", "swiftshader", "warp", "microsoft basic render")

_lock = threading.RLock()
_device: Device | None = None
_failure: tuple[tuple, str] | None = None  # (settings, why) of the last failed attempt
_broken: str | None = None
_allow_software: bool | None = None
_injected: set[str] = set()
_env_injection_used = False
_instance_backends: tuple[str, ...] | None = None


# ------------------------------------------------------------------------------------------------ switches


def allow_software(allow: bool = True) -> None:
    """Accept software adapters (the CLI's --allow-software); the env var FACERUN_ALLOW_SOFTWARE=1 does the same."""
    global _allow_software, _failure
    with _lock:
        _allow_software = bool(allow)
        _failure = None


def software_allowed() -> bool:
    if _allow_software is not None:
        return _allow_software
    return settings.get("FACERUN_ALLOW_SOFTWARE")


def switched_off() -> str | None:
    """Why the GPU is switched off by the environment, or None."""
    if not settings.get("FACERUN_GPU"):
        return "switched off by FACERUN_GPU=off"
    if settings.get("FACERUN_GPU_BACKEND") == "off":
        return "switched off by FACERUN_GPU_BACKEND=off"
    return None


def wanted_backends() -> tuple[str, ...]:
    """The wgpu backends to enumerate: the one FACERUN_GPU_BACKEND names, else the platform's primary ones (never GL
    by default: it is slow to probe and noisy on headless machines)."""
    name = settings.get("FACERUN_GPU_BACKEND")
    if name and name != "off":
        if name not in BACKENDS:
            raise GpuError(f"FACERUN_GPU_BACKEND={name} is not one of {', '.join(BACKENDS)}, off")
        return (BACKENDS[name],)
    if sys.platform == "darwin":
        return ("Metal",)
    if sys.platform.startswith("win"):
        return ("DX12", "Vulkan")
    return ("Vulkan",)


def _settings() -> tuple:
    return (
        switched_off(),
        settings.get("FACERUN_GPU_BACKEND"),
        settings.get("FACERUN_GPU_ADAPTER"),
        software_allowed(),
    )


# ----------------------------------------------------------------------------------------- failure tracking


def broken_reason() -> str | None:
    """Why the GPU stopped being used (a device error), if it did."""
    return _broken


def mark_broken(why: str) -> None:
    global _broken
    with _lock:
        if _broken is None:
            _broken = why
            log.warning("GPU disabled for the rest of this process: %s", why)


def clear_broken() -> None:
    """Forget a failure (tests, after an injected one)."""
    global _broken
    with _lock:
        _broken = None


def inject_failure(stage: str | None = "submit") -> None:
    """Tests: make the next GPU submission (stage "submit") or read-back ("readback") fail like a device error."""
    if stage not in ("submit", "readback", None):
        raise ValueError("stage is 'submit' or 'readback'")
    with _lock:
        if stage is None:
            _injected.clear()
        else:
            _injected.add(stage)


def take_injected(stage: str) -> bool:
    """Whether an injected failure is due at `stage` (consumed once)."""
    global _env_injection_used
    with _lock:
        if stage in _injected:
            _injected.discard(stage)
            return True
        if not _env_injection_used and settings.get("FACERUN_GPU_INJECT_FAILURE") == stage:
            _env_injection_used = True
            return True
    return False


class _WgpuLogWatch(logging.Handler):
    """Sees what wgpu reports only through its logger: uncaptured errors (at submit) and a lost device."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.count = 0
        self.last = ""

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must not break the caller
            msg = str(record.msg)
        first = msg.strip().splitlines()[0] if msg.strip() else "unknown error"
        self.count += 1
        self.last = first
        if "lost" in msg.lower():
            mark_broken(f"the device was lost: {first}")


_watch = _WgpuLogWatch()


def errors_seen() -> tuple[int, str]:
    """(how many errors wgpu logged so far, the last one's first line)."""
    return _watch.count, _watch.last


# ----------------------------------------------------------------------------------------------- adapters


@contextmanager
def _quiet_stderr():
    """Swallow what native code prints on fd 2 while adapters are probed (Mesa's "XDG_RUNTIME_DIR is invalid" on
    headless machines), passing on every other line."""
    fd = 2  # the process's stderr, whatever sys.stderr is (pytest replaces it)
    try:
        sys.stderr.flush()
        saved = os.dup(fd)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            rest = [line for line in text.splitlines() if "XDG_RUNTIME_DIR" not in line]
            if rest:
                sys.stderr.write("\n".join(rest) + "\n")


def _enumerate(backends: tuple[str, ...]):
    """All adapters of `backends` (wgpu objects). The instance is created once per process, for those backends."""
    global _instance_backends
    import wgpu
    from wgpu.backends.wgpu_native import extras

    wlog = logging.getLogger("wgpu")
    if _watch not in wlog.handlers:
        wlog.addHandler(_watch)
    with _quiet_stderr():
        if _instance_backends is None:
            try:
                extras.set_instance_extras(backends=list(backends))
                _instance_backends = backends
            except RuntimeError:  # an instance exists already (made elsewhere in this process): filter below
                _instance_backends = ("All",)
        adapters = wgpu.gpu.enumerate_adapters_sync()
    return [a for a in adapters if a.info.get("backend_type") in backends]


def _adapter_name(info) -> str:
    return info.get("device") or info.get("description") or info.get("vendor") or "unknown adapter"


def is_software(info) -> bool:
    name = _adapter_name(info).lower()
    return info.get("adapter_type") == "CPU" or any(s in name for s in SOFTWARE_NAMES)


def limits_problem(limits: dict) -> str | None:
    """Why an adapter's limits are too small for facerun's kernels, or None."""
    short = [f"{k.replace('max-', '').replace('-', ' ')} {limits.get(k, 0)} < {need}"
             for k, need in NEEDS.items() if limits.get(k, 0) < need]
    return "limits too small: " + ", ".join(short) if short else None


def adapter_index(wanted: str) -> int | None:
    """N of FACERUN_GPU_ADAPTER=#N, None for a name; GpuError for a '#' without a number."""
    if not wanted.startswith("#"):
        return None
    try:
        index = int(wanted[1:])
    except ValueError:
        index = -1
    if index < 0:
        raise GpuError(f"FACERUN_GPU_ADAPTER={wanted}: after '#' comes an adapter number (0, 1, ...)")
    return index


def _numbered(infos: list[dict]) -> list[int]:
    """Which adapters `#N` counts, in order: the hardware ones, or the software ones on a machine with no other."""
    hardware = [i for i, info in enumerate(infos) if not is_software(info)]
    return hardware or list(range(len(infos)))


def skip_reason(info: dict, limits: dict, allow_soft: bool, wanted: str) -> str | None:
    """Why facerun would not use an adapter (None: usable). A `#N` in `wanted` is applied by `_survey`."""
    name = _adapter_name(info)
    if wanted and not wanted.startswith("#") and wanted.lower() not in name.lower():
        return f"FACERUN_GPU_ADAPTER={wanted} does not match"
    if is_software(info) and not allow_soft:
        return "software adapter: the CPU path is faster (use --allow-software or FACERUN_ALLOW_SOFTWARE=1)"
    return limits_problem(limits)


_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4}


def _survey(allow_soft: bool | None = None) -> tuple[list[dict], list]:
    """Every adapter of the wanted backends, described, with the chosen one marked `used`; and the adapter objects."""
    off = switched_off()
    backends = wanted_backends()
    adapters = _enumerate(backends)
    allow = software_allowed() if allow_soft is None else allow_soft
    wanted = settings.get("FACERUN_GPU_ADAPTER")
    index = adapter_index(wanted)
    numbered = _numbered([dict(a.info) for a in adapters])
    rows = []
    for position, a in enumerate(adapters):
        info, limits = dict(a.info), dict(a.limits)
        why = off or skip_reason(info, limits, allow, wanted)
        if why is None and index is not None and (index >= len(numbered) or numbered[index] != position):
            why = (f"FACERUN_GPU_ADAPTER={wanted} picks another adapter" if index < len(numbered) else
                   f"FACERUN_GPU_ADAPTER={wanted}: only {len(numbered)} adapter{'s' * (len(numbered) != 1)} "
                   "to number")
        rows.append(
            {
                "name": _adapter_name(info),
                "backend": info.get("backend_type", ""),
                "type": info.get("adapter_type", ""),
                "vendor": info.get("vendor", ""),
                "driver": info.get("description", ""),
                "limits": {k: limits.get(k) for k in TAKE_LIMITS},
                "used": False,
                "skipped_because": why,
            }
        )
    usable = [i for i, r in enumerate(rows) if r["skipped_because"] is None]
    if usable:
        best = min(usable, key=lambda i: (_TYPE_RANK.get(rows[i]["type"], 3), i))
        rows[best]["used"] = True
        for i in usable:
            if i != best:
                rows[i]["skipped_because"] = f"another adapter is preferred ({rows[best]['name']})"
    return rows, adapters


def describe_adapters(allow_software: bool | None = None) -> list[dict]:
    """Every adapter facerun sees (name, backend, type, vendor, driver, key limits), which one it would use and why
    each other one is skipped. Raises GpuError if the backend cannot even be probed."""
    try:
        return _survey(allow_software)[0]
    except GpuError:
        raise
    except Exception as e:  # a broken driver stack must not crash the caller
        raise GpuError(f"could not list GPU adapters: {e}") from None


def adapter_reason(rows: list[dict] | None = None) -> str:
    """In words, which adapter facerun uses and why, or why none."""
    off = switched_off()
    if off:
        return off
    if _broken:
        return f"stopped after a GPU failure: {_broken}"
    if rows is None:
        try:
            rows = describe_adapters()
        except GpuError as e:
            return str(e)
    used = [r for r in rows if r["used"]]
    if used:
        r = used[0]
        return f"using {r['name']} ({r['backend']}, {r['type']})"
    if not rows:
        return f"no GPU adapter found for {'/'.join(wanted_backends())}"
    return "no usable GPU adapter: " + "; ".join(f"{r['name']}: {r['skipped_because']}" for r in rows)


# ------------------------------------------------------------------------------------------------- device


COMPILE_THREADS = 8  # pipelines compiled side by side at most


@dataclass(eq=False)
class Device:
    """The wgpu device and what every runner shares: the bind-group layout and compiled pipelines."""

    device: object
    queue: object
    name: str
    backend: str
    adapter_type: str
    limits: Limits
    raw_limits: dict
    layout: object = None
    pipeline_layout: object = None
    dummy: object = None
    _pipelines: dict = field(default_factory=dict)
    _plock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.backend})"

    trusted: bool = False  # kernels marked trusted compile without the shader compiler's bounds checks
    has_f16: bool = False  # the shader-f16 feature was granted (half-float kernels, --precision f16)
    vendor: str = ""
    driver: str = ""  # the adapter's description: the driver and its version

    def identity(self) -> dict:
        """What a check's findings on this device depend on (verdicts.py): the adapter, its driver, the kernels'
        build."""
        return {"name": self.name, "backend": self.backend, "type": self.adapter_type, "vendor": self.vendor,
                "driver": self.driver, "trusted": self.trusted, "f16": self.has_f16}

    def pipeline(self, kernel: kernels.Kernel):
        """The compute pipeline of a kernel, compiled once."""
        return self.pipelines([kernel])[0]

    def pipelines(self, wanted: list) -> list:
        """The compute pipelines of several kernels, compiled once each; the missing ones side by side on threads
        (the driver's shader compiler is the cost of a cold start, and it runs outside the GIL)."""
        with self._plock:
            missing = list({k.key: k for k in wanted if k.key not in self._pipelines}.values())
        if len(missing) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(len(missing), COMPILE_THREADS), thread_name_prefix="facerun-shader") as pool:
                made = list(pool.map(self._create, missing))
        else:
            made = [self._create(k) for k in missing]
        with self._plock:
            for k, p in zip(missing, made):
                if k.key not in self._pipelines:
                    self._pipelines[k.key] = p
                    counters.bump("pipelines_created")
            return [self._pipelines[k.key] for k in wanted]

    def _create(self, kernel: kernels.Kernel):
        with counters.timed("pipelines_created"):
            module = None
            if self.trusted and kernel.trusted:
                module = trusted_module(self.device, kernel.key, kernel.code())
                if module is not None:
                    counters.bump("trusted_modules")
            if module is None:
                module = self.device.create_shader_module(label=kernel.key, code=kernel.code())
            return self.device.create_compute_pipeline(
                label=kernel.key, layout=self.pipeline_layout, compute={"module": module, "entry_point": kernel.entry})


def checked_build() -> bool:
    """Whether FACERUN_GPU_CHECKED asks for the bounds-checked build of every kernel."""
    return settings.get("FACERUN_GPU_CHECKED")


def trusted_module(device, label: str, code: str):
    """A WGSL module compiled without runtime checks (naga's bounds clamping and loop bounding), through wgpu-native's
    wgpuDeviceCreateShaderModuleTrusted; None where this wgpu build lacks it. Only for kernels whose every index the
    planner keeps in range: an index out of range there reads or writes past a buffer instead of being clamped."""
    try:
        from wgpu.backends.wgpu_native import _api
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        create = _api.libf.wgpuDeviceCreateShaderModuleTrusted
        no_checks = lib.WGPUShaderRuntimeChecks_None
    except (ImportError, AttributeError):
        return None
    source = _api.new_struct_p("WGPUShaderSourceWGSL *", code=_api.to_c_string_view(code))
    source[0].chain.next = ffi.NULL
    source[0].chain.sType = lib.WGPUSType_ShaderSourceWGSL
    chained = ffi.cast("WGPUChainedStruct *", source)
    desc = _api.new_struct_p("WGPUShaderModuleDescriptor *", nextInChain=chained, label=_api.to_c_string_view(label))
    handle = create(device._internal, desc, no_checks)
    if handle == ffi.NULL:
        return None
    return _api.GPUShaderModule(label, handle, device)


def _make_device(adapter, row: dict) -> Device:
    import wgpu

    have = dict(adapter.limits)
    required = {k: have[k] for k in TAKE_LIMITS if k in have}
    features = ["shader-f16"] if "shader-f16" in adapter.features else []
    dev = adapter.request_device_sync(label="facerun", required_limits=required, required_features=features)
    lim = dict(dev.limits)
    limits = Limits(
        max_workgroups_per_dim=int(lim["max-compute-workgroups-per-dimension"]),
        max_binding=int(min(lim["max-storage-buffer-binding-size"], lim["max-buffer-size"])),
        max_invocations=int(lim["max-compute-invocations-per-workgroup"]),
        max_workgroup_storage=int(lim["max-compute-workgroup-storage-size"]),
    )
    d = Device(dev, dev.queue, row["name"], row["backend"], row["type"], limits, lim, trusted=not checked_build(),
               has_f16="shader-f16" in dev.features, vendor=str(row.get("vendor", "")),
               driver=str(row.get("driver", "")))
    kinds = {kernels.UNIFORM_BINDING: wgpu.BufferBindingType.uniform,
             kernels.OUT_BINDING: wgpu.BufferBindingType.storage}
    kinds.update({b: wgpu.BufferBindingType.read_only_storage
                  for b in (*kernels.READ_BINDINGS, kernels.PHOTOS_BINDING)})
    entries = [{"binding": b, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kinds[b]}}
               for b in sorted(kinds)]
    d.layout = dev.create_bind_group_layout(label="facerun", entries=entries)
    d.pipeline_layout = dev.create_pipeline_layout(label="facerun", bind_group_layouts=[d.layout])
    d.dummy = dev.create_buffer(label="facerun unused binding", size=16, usage=wgpu.BufferUsage.STORAGE)
    with counters.timed("ffi_types_parsed"):
        parse_ffi_types()
    return d


# The C types wgpu-py and facerun's raw calls name when they make pipelines, bind groups, passes and read-backs.
# cffi parses each name once per process (some 20-40 ms apiece: pycparser over every wgpu typedef); parsed here,
# once, instead of on the first photo, where the pipeline threads each parsed the same names side by side.
FFI_TYPES = ("WGPUShaderSourceWGSL *", "WGPUShaderModuleDescriptor *", "WGPUComputeState *",
             "WGPUComputePipelineDescriptor *", "intptr_t", "WGPUBindGroupEntry[]", "WGPUBindGroupEntry *",
             "WGPUBindGroupDescriptor *", "WGPUComputePassDescriptor *", "WGPUCommandEncoderDescriptor *",
             "WGPUCommandBufferDescriptor *", "WGPUCommandBuffer[]", "uint8_t []", "uintptr_t", "uint8_t *",
             "WGPUBufferMapCallbackInfo *")


def parse_ffi_types(names=FFI_TYPES) -> None:
    """Have cffi parse these C type names now (each once per process; a name this wgpu does not have is skipped)."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi
    except ImportError:
        return
    for name in names:
        try:
            ffi.typeof(name)
        except Exception:  # a name this wgpu build does not have: it is not used either
            continue


def get_device() -> Device:
    """The device, created on first use; GpuError with the reason when there is none (switched off, no usable adapter,
    broken by an earlier failure)."""
    global _device, _failure
    if _broken:
        raise GpuError(f"the GPU is not used any more: {_broken}")
    off = switched_off()
    if off:
        raise GpuError(off)
    if _device is not None:
        return _device
    with _lock:
        if _device is not None:
            return _device
        settings = _settings()
        if _failure is not None and _failure[0] == settings:
            raise GpuError(_failure[1])
        try:
            rows, adapters = _survey()
            used = [i for i, r in enumerate(rows) if r["used"]]
            if not used:
                raise GpuError(adapter_reason(rows))
            i = used[0]
            _device = _make_device(adapters[i], rows[i])
            log.info("GPU: %s", _device.label)
            return _device
        except GpuError as e:
            _failure = (settings, str(e))
            raise
        except Exception as e:  # anything the driver stack throws
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            why = f"GPU device creation failed: {type(e).__name__}: {first}"
            _failure = (settings, why)
            raise GpuError(why) from None


def gpu_available() -> tuple[bool, str]:
    """(whether facerun can use a GPU, the reason in words). Creates the device on first use."""
    try:
        d = get_device()
    except GpuError as e:
        return False, str(e)
    return True, f"using {d.label}"
