"""What a benchmark ran on: the CPU, numpy and its BLAS, the OS and Python, and the GPU adapter (or why none).

Timings mean little without this: the same numpy build can pick a different OpenBLAS kernel set per CPU (or be forced
to one with OPENBLAS_CORETYPE), so the header records the core type OpenBLAS actually chose at run time. Every probe
here is best-effort: a missing tool yields "unknown", never an exception.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from importlib import metadata

from .. import settings

# Environment variables that change how fast numpy and onnxruntime run; recorded when set.
PERFORMANCE_ENV = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_L2_SIZE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MKL_ENABLE_INSTRUCTIONS",
    "FACERUN_GPU",
    "FACERUN_GPU_BACKEND",
    "FACERUN_GPU_ADAPTER",
    "FACERUN_ALLOW_SOFTWARE",
)


def machine_info() -> dict:
    """The host as a plain dict (JSON-ready)."""
    import numpy as np

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": _usable_cores(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas_info(),
        "cpu_interpreter": cpu_interpreter_info(),
        "facerun": _version("facerun"),
        "onnxruntime": _version("onnxruntime"),
        "wgpu": _version("wgpu"),
        "env": settings.outside(PERFORMANCE_ENV),
        "load_average": _load_average(),
        "busy_before": cpu_busy_fraction(),
    }


def cpu_interpreter_info() -> dict:
    """The CPU interpreter's threads and how a laned program shares them (cpu/lanes.py), when the machine is idle."""
    from ..cpu import lanes

    total = lanes.threads()
    count, openblas = lanes.share(total)
    return {"threads": total, "lanes": count, "openblas": openblas}


def cpu_busy_fraction(interval: float = 0.2) -> float | None:
    """How busy the CPUs were (0..1) over `interval` seconds just now, while this process slept: other work that
    will compete with the benchmark. (The load average also counts the benchmark's own earlier rows.) Linux only."""
    import time

    def sample():
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    try:
        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    spent = total1 - total0
    return round(1.0 - (idle1 - idle0) / spent, 2) if spent > 0 else None


def cpu_model() -> str:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    # x86 says "model name"; many ARM kernels only give "Hardware" or "CPU part"
                    if key.strip() in ("model name", "Hardware") and value.strip():
                        return value.strip()
        except OSError:
            pass
    elif sys.platform == "darwin":
        import subprocess

        try:
            done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=5)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def blas_info() -> dict:
    """numpy's BLAS: name and version, and when it can be asked, the kernel set chosen at run time and its threads.

    threadpoolctl gives this for any BLAS when installed; otherwise numpy's build configuration names the library,
    and OpenBLAS itself (already loaded by numpy) is asked for its core type through ctypes."""
    info: dict = {"name": "unknown", "version": None, "corename": None, "threads": None}
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                info.update(name=pool.get("internal_api"), version=pool.get("version"),
                            corename=pool.get("architecture"), threads=pool.get("num_threads"))
                return info
    except Exception:  # not installed, or it could not inspect this process
        pass
    info.update(_numpy_build_blas())
    info.update(_openblas_runtime())
    return info


def _numpy_build_blas() -> dict:
    import numpy as np

    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return {"name": deps.get("name") or "unknown", "version": deps.get("version")}
    except Exception:  # numpy < 1.26 has no mode="dicts"; older configs differ in layout
        pass
    try:
        cfg = getattr(np, "__config__", None)
        for key in ("blas_opt_info", "openblas_info", "blas_mkl_info"):
            libs = getattr(cfg, key, None) or {}
            if libs.get("libraries"):
                return {"name": ",".join(libs["libraries"])}
    except Exception:
        pass
    return {}


def _openblas_runtime() -> dict:
    """Ask the OpenBLAS that numpy loaded which core type it picked and how many threads it runs."""
    from ..blas import openblas_symbol

    corename = openblas_symbol("get_corename")
    if corename is None:
        return {}
    corename.restype = ctypes.c_char_p
    out = {"corename": corename().decode(errors="replace")}
    threads = openblas_symbol("get_num_threads")
    if threads is not None:
        threads.restype = ctypes.c_int
        out["threads"] = int(threads())
    return out


def device_info(allow_software: bool | None = None) -> dict:
    """The GPU adapter facerun would use (name, backend, type, driver) and `reason` in words, or why there is none."""
    try:
        from ..gpu import device as gpu_device
    except Exception as e:  # the GPU part missing or wgpu not importable
        return {"name": None, "reason": f"GPU support unavailable: {type(e).__name__}: {e}"}
    try:
        rows = gpu_device.describe_adapters(allow_software)
    except Exception as e:
        return {"name": None, "reason": str(e) or type(e).__name__}
    used = [r for r in rows if r.get("used")]
    info: dict = {"name": None}
    if used:
        r = used[0]
        info.update(name=r.get("name"), backend=r.get("backend"), type=r.get("type"), driver=r.get("driver"))
    try:
        info["reason"] = gpu_device.adapter_reason(rows)
    except Exception as e:
        info["reason"] = str(e)
    return info


def describe_machine(m: dict) -> str:
    """One line for a table header."""
    cores = f"{m.get('cores')} cores"
    if m.get("usable_cores") not in (None, m.get("cores")):
        cores += f" ({m['usable_cores']} usable)"
    parts = [f"{m.get('cpu', 'unknown CPU')}, {cores}", m.get("os", "?"), f"Python {m.get('python', '?')}",
             f"numpy {m.get('numpy', '?')} with {describe_blas(m.get('blas') or {})}"]
    interp = m.get("cpu_interpreter")
    if interp:
        parts.append(f"CPU interpreter {interp['threads']} thread{'s' if interp['threads'] != 1 else ''}: "
                     f"{interp['lanes']} lane{'s' if interp['lanes'] != 1 else ''}, OpenBLAS {interp['openblas']}")
    if m.get("onnxruntime"):
        parts.append(f"onnxruntime {m['onnxruntime']}")
    if m.get("env"):
        parts.append(" ".join(f"{k}={v}" for k, v in m["env"].items()))
    load = m.get("load_average")
    if load:
        parts.append("load " + " ".join(f"{v:.2f}" for v in load))
    if m.get("busy_before") is not None:
        parts.append(f"CPU {m['busy_before']:.0%} busy before the run")
    return " · ".join(parts)


def describe_blas(b: dict) -> str:
    text = str(b.get("name") or "unknown BLAS")
    if b.get("version"):
        text += f" {b['version']}"
    extra = []
    if b.get("corename"):
        extra.append(f"core {b['corename']}")
    if b.get("threads"):
        extra.append(f"{b['threads']} thread{'s' if b['threads'] != 1 else ''}")
    return text + (f" ({', '.join(extra)})" if extra else "")


def describe_device(d: dict) -> str:
    if d.get("name"):
        bits = [x for x in (d.get("backend"), d.get("type"), d.get("driver")) if x]
        return f"{d['name']}" + (f" ({', '.join(bits)})" if bits else "")
    return f"none ({d.get('reason') or 'no GPU adapter'})"


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        if dist == "facerun":
            from .. import __version__

            return __version__
        return None
