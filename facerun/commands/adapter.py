"""`facerun adapter`: the GPU adapters facerun sees, the one it would use, and why each other one is skipped."""

from __future__ import annotations

import click

from .common import EXIT_NO_GPU, allow_software_option, fmt_bytes, out, print_json
from .options import json_option


@click.command("adapter")
@json_option("instead of tables: the adapters.")
@allow_software_option(hidden=True)
def command(as_json: bool, allow_software: bool):
    """List every GPU adapter of the wanted backend with its key limits, say which one facerun would use and why
    each other one is skipped, or why none is usable. Software adapters (llvmpipe/lavapipe, WARP, SwiftShader) are
    skipped, since the CPU path is faster than they are, unless `facerun adapter --allow-software`.

    Switches: FACERUN_GPU=off, FACERUN_GPU_BACKEND=vulkan|metal|dx12|gl|off, FACERUN_GPU_ADAPTER=<name substring>.
    Also says how many models' GPU checks are kept for later runs (FACERUN_GPU_CHECK_CACHE), and where."""
    from .. import gpu
    from ..errors import GpuError
    from ..gpu.verdicts import kept_summary

    try:
        rows = gpu.describe_adapters()
        probe_error = None
    except GpuError as e:
        rows, probe_error = [], str(e)
    reason = probe_error or gpu.adapter_reason(rows)
    used = next((r["name"] for r in rows if r["used"]), None)
    kept = kept_summary()
    if as_json:
        print_json({"adapters": rows, "used": used, "reason": reason, "kept_checks": kept})
        _exit_unless(used)
        return
    for r in rows:
        lim = r["limits"]
        binding = min(v for v in (lim.get("max-storage-buffer-binding-size"), lim.get("max-buffer-size")) if v)
        mark = "[green]*[/]" if r["used"] else " "
        out.print(f"{mark} [bold]{r['name']}[/]  {r['backend']}, {r['type']}, {r['driver'] or r['vendor']}")
        workgroup_memory = fmt_bytes(lim.get("max-compute-workgroup-storage-size") or 0)
        out.print(f"    largest binding {fmt_bytes(binding)}, workgroup memory {workgroup_memory}, "
                  f"{lim.get('max-compute-invocations-per-workgroup')} invocations, "
                  f"{lim.get('max-compute-workgroups-per-dimension')} workgroups per dimension")
        out.print("    [green]used[/]" if r["used"] else f"    skipped: {r['skipped_because']}")
    out.print(f"facerun: {reason}")
    if kept["files"]:
        state = "trusted by later runs" if kept["used"] else "not used (FACERUN_GPU_CHECK_CACHE=off)"
        out.print(f"models' GPU checks kept: {kept['files']} in {kept['folder']}, {state}; delete the folder to "
                  "check anew")
    _exit_unless(used)


def _exit_unless(used) -> None:
    if used is None:  # scripts can tell "no usable GPU" from the exit status alone
        raise SystemExit(EXIT_NO_GPU)
