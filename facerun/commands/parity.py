"""`facerun parity MODEL`: how closely facerun's paths agree (CPU vs onnxruntime, GPU vs CPU)."""

from __future__ import annotations

import click
from rich.table import Table

from ..errors import FacerunError
from .common import (
    allow_software_option,
    err,
    finish,
    input_shape,
    models_dir_option,
    off_card_size,
    out,
    parse_size,
    print_json,
    sample_input,
)
from .options import batch_option, device_option, json_option, size_option


@click.command("parity")
@click.argument("model")
@models_dir_option()
@size_option(detail="an image model's, e.g. 640x480 (default: the file's own size).")
@batch_option(1, "the batch dimension of the seeded input.", type=click.IntRange(1, 1024))
@device_option(("cpu", "gpu"), "cpu", "The path under test: the CPU interpreter, or the WGSL device path.")
@click.option("--against", type=click.Choice(["onnxruntime", "cpu"]), default=None,
              help="The reference (default: onnxruntime for --device cpu, the CPU interpreter for --device gpu).")
@click.option("--steps", is_flag=True, help="Also find the first step whose value departs beyond tolerance.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the random input.")
@allow_software_option(hidden=True)
@json_option("instead of lines.")
def command(model, size, batch, device, against, steps, seed, allow_software, as_json):
    """Compare facerun's output for MODEL with a reference on a seeded random input: per output the max abs diff,
    the max relative diff (over the reference's largest magnitude) and the cosine. An output agrees when its max abs
    diff is within 1e-4 of its range (1e-3 for the GPU against the CPU interpreter). Exit status 1 when any output
    departs.

    MODEL is an .onnx file or a built-in replica name."""
    from .. import agree
    from ..net import load

    against = against or ("onnxruntime" if device == "cpu" else "cpu")
    if device == "cpu" and against == "cpu":
        raise FacerunError("--device cpu --against cpu compares the interpreter with itself; pick onnxruntime")
    net = load(model, device="gpu" if device == "gpu" else "cpu")
    size = parse_size(size)
    shape = input_shape(net, size, batch)
    net.program(shape)  # a shape the model cannot take fails here, with facerun's message
    warning = off_card_size(net, size)  # only for a shape it can take: an error is the one line then
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    x = sample_input(net, shape, seed)

    if against == "onnxruntime":
        from ..bench import oracle

        sess = oracle.session(net.path)
        reference = oracle.run(sess, {net.input_name: x})
    else:
        reference = net.run_cpu(x)
    got = net.run(x) if device == "gpu" else net.run_cpu(x)
    tol = agree.GPU if device == "gpu" else agree.ONNXRUNTIME
    diffs = [agree.compare(name, got[name], reference[name], tol) for name in net.output_names]
    ok = all(d.ok for d in diffs)

    first = None
    compared = 0
    if steps:
        if device == "gpu":
            first, compared = agree.first_departing_gpu_step(net, x)
        else:
            from ..bench import oracle

            def reference_steps(names):
                extra = [n for n in names if n not in net.output_names]
                return oracle.run(oracle.session(net.path, extra_outputs=extra), {net.input_name: x})

            first, compared = agree.first_departing_step(net, x, reference_steps)
        ok = ok and first is None

    result = {
        "model": net.label,
        "size": list(shape),
        "device": net.device if device == "gpu" else "cpu",
        "against": against,
        "outputs": [d.as_dict() for d in diffs],
        "ok": ok,
    }
    if steps:
        result["steps_compared"] = compared
        result["first_departing_step"] = None if first is None else {
            "index": first.index, "op": first.op, "node": first.node, "value": first.value, **first.diff.as_dict()}
    if as_json:
        print_json(result)
    else:
        t = Table(title=f"{net.label} {list(shape)}: {result['device']} vs {against}", header_style="bold")
        for col in ("output", "shape", "max abs", "max rel", "cosine", ""):
            t.add_column(col, justify="left" if col in ("output", "shape", "") else "right")
        for d in diffs:
            both = f" ({d.nonfinite} NaN/inf on both sides)" if d.nonfinite else ""
            verdict = f"[green]ok[/]{both}" if d.ok else f"[red]DEPARTS[/]: {d.why()}"
            t.add_row(d.name, "x".join(map(str, d.shape)), f"{d.max_abs:.3g}", f"{d.max_rel:.3g}", f"{d.cosine:.7f}",
                      verdict)
        out.print(t)
        if steps:
            if first is None:
                out.print(f"every step agrees ({compared} compared)")
            else:
                out.print(f"[red]first departing step[/]: #{first.index} {first.op} '{first.node}' -> {first.value}: "
                          f"max abs {first.diff.max_abs:.3g} (range {first.diff.range:.3g})")
        out.print("[green]ok[/]" if ok else "[red]parity fails[/]")
    finish(ok)
