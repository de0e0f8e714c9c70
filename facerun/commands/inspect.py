"""`facerun inspect MODEL`: the compiled program as a table, with totals and what was folded."""

from __future__ import annotations

from collections import Counter

import click
from rich.markup import escape
from rich.table import Table

from .. import program as P
from .common import fmt_bytes, fmt_count, input_shape, models_dir_option, out, parse_size, print_json
from .options import batch_option, json_option, size_option


def _notes(st: P.Step) -> str:
    bits = []
    if isinstance(st, P.Conv):
        kh, kw = st.kernel
        bits.append(f"{kh}x{kw}/{st.stride[0]}")
        if st.groups > 1:
            bits.append("depthwise" if st.depthwise else f"groups {st.groups}")
        if st.dilation != (1, 1):
            bits.append(f"dilation {st.dilation[0]}")
        if any(st.pads):
            bits.append("pads " + ",".join(map(str, st.pads)))
        if st.residual is not None:
            bits.append("+residual")
    if isinstance(st, P.Binary):
        bits.append(st.kind)
    if isinstance(st, P.Pool):
        bits.append(f"{st.kernel[0]}x{st.kernel[1]}/{st.stride[0]}")
    act = getattr(st, "act", None)
    if act is not None and not isinstance(st, P.Unary):
        bits.append("+" + act.describe())
    if isinstance(st, P.Unary):
        bits.append(st.act.describe())
    return " ".join(bits)


def _folded_kind(entry: str) -> str:
    """"Conv folded ...", "Relu fused ..." -> "Conv folded", "Relu fused"; anything else was evaluated."""
    how = "folded" if "folded" in entry else "fused" if "fused" in entry else "evaluated"
    return f"{entry.split(' ', 1)[0]} {how}"


def _describe_card(card) -> str:
    """"embedder, arcface-style, known as mobilefacenet; 112x112 RGB (x-127.5)/127.5; threshold 0.35"."""
    origin = {"known": f"known as {card.name}", "replica": f"replica {card.name}",
              "sidecar": f"described by {card.sidecar}", "graph": "recognised by its graph",
              "given": "described by the caller"}.get(card.source, card.source)
    parts = [", ".join(p for p in (card.kind, card.family, origin) if p)]
    parts.append(card.preprocess.describe() if card.preprocess is not None else "pre-processing unknown")
    if card.threshold is not None:
        parts.append(f"threshold {card.threshold:g}")
    return "; ".join(parts)


@click.command("inspect")
@click.argument("model")
@models_dir_option()
@size_option(detail="an image model's, e.g. 640x480 (default: the file's own size).")
@batch_option(1, "the batch size to compile for.", type=click.IntRange(1, 4096))
@json_option()
@click.option("--all-folded", is_flag=True, help="List every folded node, not only counts.")
def command(model, size, batch, as_json, all_folded):
    """Show the step program MODEL compiles to: each step's op, output shape and multiply-adds, and the totals
    (parameters, MACs, peak activation memory, steps), plus what the compiler folded away.

    MODEL is an .onnx file or a built-in replica name (e.g. auraface-arch)."""
    from ..net import load

    net = load(model)
    shape = input_shape(net, parse_size(size), batch)
    prog = net.program(shape)
    rows = []
    for i, st in enumerate(prog.steps):
        rows.append(
            {
                "step": i,
                "op": st.op,
                "node": st.node,
                "shape": list(prog.shape(st.out)),
                "macs": st.macs(prog),
                "notes": _notes(st),
                "frees": len(st.frees),
            }
        )
    folded_kinds = Counter(_folded_kind(f) for f in prog.folded)
    totals = {
        "parameters": prog.parameters,
        "macs": prog.macs,
        "peak_activation_bytes": prog.peak_bytes,
        "steps": len(prog.steps),
        "folded": len(prog.folded),
    }
    if as_json:
        print_json(
            {
                "model": net.label,
                "sha256": net.sha256,
                "card": net.card.as_dict(),
                "input": list(shape),
                "outputs": [{"name": n, "shape": list(prog.shape(v))} for n, v in prog.outputs],
                "totals": totals,
                "steps": rows,
                "folded": prog.folded,
            }
        )
        return
    t = Table(title=f"{net.label}  input {list(shape)}", header_style="bold")
    for col, j in (("#", "right"), ("op", "left"), ("node", "left"), ("output", "left"), ("MACs", "right"),
                   ("", "left")):
        t.add_column(col, justify=j)
    for r in rows:
        macs = fmt_count(r["macs"]) if r["macs"] else ""
        t.add_row(str(r["step"]), r["op"], r["node"][:40], "x".join(map(str, r["shape"])), macs, r["notes"])
    out.print(t)
    out.print(
        f"[bold]parameters[/] {fmt_count(totals['parameters'])}   [bold]MACs[/] {fmt_count(totals['macs'])}   "
        f"[bold]peak activations[/] {fmt_bytes(totals['peak_activation_bytes'])}   [bold]steps[/] {totals['steps']}"
    )
    out.print("[bold]outputs[/] " + ", ".join(f"{n} {'x'.join(map(str, prog.shape(v)))}" for n, v in prog.outputs))
    out.print("[bold]card[/] " + escape(_describe_card(net.card)))
    if prog.folded:
        out.print("[bold]folded[/] " + ", ".join(f"{n} {k}" for k, n in sorted(folded_kinds.items())))
        if all_folded:
            for f in prog.folded:
                out.print(f"  {f}")
