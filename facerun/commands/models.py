"""`facerun models`: where facerun looks for model files, which known models are there, checking and fetching them."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ..errors import ModelError
from ..zoo import find
from ..zoo.known import KNOWN, by_name
from .common import err, error_line, fmt_bytes, json_dumps, models_dir_option, out, progress_bar
from .options import json_option
from .types import FiniteRange


def _models_dir(ctx: click.Context, given: str | None) -> str | None:
    """A subcommand's --models, else the group's (`facerun models --models DIR list` works too)."""
    if given:
        return given
    parent = ctx.parent
    return parent.params.get("models_dir") if parent is not None else None


def _short(sha: str | None) -> str:
    return f"{sha[:16]}…" if sha else "-"


# ------------------------------------------------------------------------------------------------------- list


def _inventory(models_dir) -> dict:
    """What `list` reports: the search folders, each known model's state, and the other .onnx files found."""
    dirs = [
        {"path": str(path), "from": source, "exists": path.is_dir()}
        for path, source in find.search_dirs_with_sources(models_dir)
    ]
    with err.status("hashing model files…"):
        found = find.scan(models_dir)
    models = []
    for model in KNOWN:
        by_content = next((f for f in found if f.known is model), None)
        by_filename = next((f for f in found if f.path.name == model.filename), None)
        hit = by_content or by_filename
        models.append(
            {
                "name": model.name,
                "kind": model.kind,
                "family": model.family,
                "license": model.license,
                "filename": model.filename,
                "present": hit is not None,
                "path": str(hit.path) if hit else None,
                "sha256_ok": (hit.sha256 == model.sha256) if hit else None,
                "size": model.size,
                "url": model.url,
            }
        )
    others = [
        {"path": str(f.path), "size": f.size, "sha256": f.sha256}
        for f in found
        if f.known is None and by_name(f.path.name) is None
    ]
    from ..zoo import replicas

    return {"search_dirs": dirs, "models": models, "other_files": others, "replica_cache": replicas.cache_usage()}


def _replica_cache_line(usage: dict) -> str:
    return (f"replica cache: {usage['path']} ({usage['files']} file{'' if usage['files'] == 1 else 's'}, "
            f"{fmt_bytes(usage['bytes'])}; `facerun models cache --clear` empties it)")


def _print_inventory(report: dict) -> None:
    where = Table(title="Where facerun looks for models (in order)", title_justify="left")
    where.add_column("#", justify="right")
    where.add_column("folder", overflow="fold")
    where.add_column("from")
    where.add_column("exists")
    for i, d in enumerate(report["search_dirs"], 1):
        where.add_row(str(i), d["path"], d["from"], "yes" if d["exists"] else "[dim]no[/dim]")
    out.print(where)

    # names, kinds and states never wrap; a file is named inside the folder it was found in (the # of the table
    # above), so the column that may fold on a narrow terminal is the least important one
    folders = [d["path"] for d in report["search_dirs"]]
    known = Table(title="Known models", title_justify="left")
    for column in ("name", "kind", "family", "state", "in"):
        known.add_column(column, no_wrap=True, justify="right" if column == "in" else "left")
    known.add_column("file", overflow="fold")
    for m in report["models"]:
        if not m["present"]:
            state, where, file = "[yellow]missing[/yellow]", "", f"[dim]facerun models fetch {m['name']}[/dim]"
        else:
            state = "ok" if m["sha256_ok"] else "[red]sha256 MISMATCH[/red]"
            where, file = _in_folder(m["path"], folders)
        known.add_row(m["name"], m["kind"], _family_title(m["family"]), state, where, file)
    out.print(known)
    for m in report["models"]:
        if (m["license"] or "").startswith("non-commercial"):
            out.print(f"{m['name']}: {m['license']}", style="yellow", markup=False)

    if report["other_files"]:
        other = Table(title="Other .onnx files (not in the known table)", title_justify="left")
        other.add_column("path", overflow="fold")
        other.add_column("bytes", justify="right")
        other.add_column("sha256")
        for f in report["other_files"]:
            other.add_row(f["path"], f"{f['size']:,}", _short(f["sha256"]))
        out.print(other)
    out.print(_replica_cache_line(report["replica_cache"]), markup=False)


@click.command(name="list")
@models_dir_option(expose=True)
@json_option()
@click.pass_context
def list_command(ctx, models_dir, as_json):
    """Show the search folders and every known model: present or missing, where, and whether its sha256 is right."""
    report = _inventory(_models_dir(ctx, models_dir))
    if as_json:
        click.echo(json_dumps(report, indent=2))
    else:
        _print_inventory(report)


# ----------------------------------------------------------------------------------------------------- verify


def _verdict(found) -> tuple[str, str | None]:
    """(status, identified model name) for one file: ok, renamed, unknown, or mismatch (named as a model it is not)."""
    named = by_name(found.path.name)
    if named is not None and named.sha256 and named.sha256 != found.sha256:
        return "mismatch", found.known.name if found.known else None
    if found.known is not None:
        return ("ok" if found.path.name == found.known.filename else "renamed"), found.known.name
    return "unknown", None


@click.command(name="verify")
@models_dir_option(expose=True)
@json_option("instead of a table.")
@click.pass_context
def verify_command(ctx, models_dir, as_json):
    """Recompute the sha256 of every .onnx file in the search folders and identify it.

    A file carrying a known model's file name but other contents is a mismatch (damaged, truncated or mislabelled):
    the command then exits with status 1.
    """
    models_dir = _models_dir(ctx, models_dir)
    with err.status("hashing model files…"):
        found = find.scan(models_dir)
    rows = []
    for f in found:
        status, identified = _verdict(f)
        rows.append({"path": str(f.path), "size": f.size, "sha256": f.sha256, "model": identified, "status": status})
    mismatches = [r for r in rows if r["status"] == "mismatch"]

    if as_json:
        click.echo(json_dumps({"files": rows, "mismatches": len(mismatches)}, indent=2))
    elif not rows:
        dirs = ", ".join(str(d) for d in find.search_dirs(models_dir))
        click.echo(f"no .onnx files in {dirs}")
    else:
        table = Table(title="Model files", title_justify="left")
        for column in ("path", "bytes", "sha256", "model", "status"):
            table.add_column(column, overflow="fold", justify="right" if column == "bytes" else "left")
        colours = {"ok": "green", "renamed": "green", "unknown": "yellow", "mismatch": "red"}
        for r in rows:
            status = f"[{colours[r['status']]}]{r['status']}[/]"
            table.add_row(r["path"], f"{r['size']:,}", _short(r["sha256"]), r["model"] or "-", status)
        out.print(table)
    if mismatches:
        names = ", ".join(r["path"] for r in mismatches)
        error_line(f"{len(mismatches)} file(s) do not hold the model their name says: {names}")
        ctx.exit(1)


# ------------------------------------------------------------------------------------------------------ fetch


@click.command(name="fetch")
@click.argument("name")
@click.option("--url", help="Download from URL (a mirror) instead of the published one; the sha256 is still checked.")
@click.option("--dest", type=click.Path(file_okay=False), metavar="DIR", help="Save into DIR, not the cache folder.")
@click.option(
    "--timeout",
    type=FiniteRange(min=0.1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Time allowed for each network operation.",
)
@click.option("--deadline", type=FiniteRange(min=1), default=find.DEFAULT_DEADLINE, show_default=True,
              metavar="SECONDS", help="Time allowed for the whole download, retries included.")
def fetch_command(name, url, dest, timeout, deadline):
    """Download the known model NAME (see `facerun models list`), check its size and sha256, and save it.

    An interrupted download resumes where it stopped the next time (within a day: older partial downloads in the
    folder, and the temporary files of killed runs, are removed first); a file with the wrong sha256 is never kept.
    """
    model = by_name(name)
    if model is None:
        raise ModelError(f"unknown model '{name}'; known: {', '.join(m.name for m in KNOWN)}")
    with progress_bar("bytes") as bar:
        task = bar.add_task(model.name, total=model.size)

        def on_progress(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        path = find.fetch(model.name, dest_dir=dest, url=url, progress=on_progress, timeout=timeout,
                          deadline=deadline)
    click.echo(f"{model.name}: {path} (sha256 ok)", err=True)
    click.echo(str(path))


# ------------------------------------------------------------------------------------------------------- path


@click.command(name="path")
def path_command():
    """Print the cache folder that `facerun models fetch` saves into (set $FACERUN_CACHE to move it)."""
    click.echo(str(find.models_cache_dir()))


@click.command(name="cache")
@click.option("--clear", is_flag=True, help="Remove the replica files (they are built again when next used).")
@json_option("instead of lines.")
def cache_command(clear, as_json):
    """Where the built-in replicas are cached and how much room they take (auraface-arch alone is 260 MB)."""
    from ..zoo import replicas

    usage = replicas.cache_usage()
    if clear:
        usage["removed"] = replicas.clear_cache()
    if as_json:
        click.echo(json_dumps(usage, indent=2))
    elif clear:
        click.echo(f"removed {usage['removed']} replica file{'' if usage['removed'] == 1 else 's'} "
                   f"({fmt_bytes(usage['bytes'])}) from {usage['path']}")
    else:
        click.echo(_replica_cache_line(usage))


# ------------------------------------------------------------------------------------------------------ group


@click.group(name="models", invoke_without_command=True)
@models_dir_option(expose=True)
@json_option("instead of tables: the list (with no subcommand).")
@click.pass_context
def command(ctx, models_dir, as_json):
    """Model files: where facerun looks, which known models are present, checking and downloading them.

    \b
    facerun models               same as `facerun models list`
    facerun models list          search folders and known models (present, missing, sha256 ok)
    facerun models verify        hash every .onnx file found; exit 1 on a file not matching its name
    facerun models fetch NAME    download a known model into the cache folder, checked by sha256
    facerun models path          print the cache folder
    facerun models cache         the replica cache: folder and size (--clear empties it)

    Search order: a path given on the command line, --models DIR, $FACERUN_MODELS (several folders joined with
    the path separator), then the cache folder ($FACERUN_CACHE/models when set).
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_command, models_dir=models_dir, as_json=as_json)


command.add_command(list_command)
command.add_command(verify_command)
command.add_command(fetch_command)
command.add_command(path_command)
command.add_command(cache_command)


def _in_folder(path: str, folders: list[str]) -> tuple[str, str]:
    """('#N', the file's path inside search folder N), or ('', the whole path) when it is in none of them."""
    for number, folder in enumerate(folders, 1):
        try:
            return f"#{number}", str(Path(path).relative_to(folder))
        except ValueError:
            continue
    return "", path


def _family_title(family: str | None) -> str:
    """A detector family's display name (YuNet, SCRFD, ...); the card's family string otherwise."""
    if not family:
        return "-"
    from ..face.families import by_name

    # cards name YuNet's generations (yunet-2023mar); the decoder registry names the family (yunet)
    found = by_name(family) or by_name(family.split("-")[0])
    return found.title if found else family
