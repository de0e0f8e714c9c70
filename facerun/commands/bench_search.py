"""`facerun bench search [N,N,...]`: face search and clustering at N faces — brute force, the vector index, and
full and incremental clustering on synthetic identities."""

from __future__ import annotations

import click
from rich.table import Table

from ..errors import InputError
from .common import json_dumps, out
from .options import json_option

DEFAULT_COUNTS = (10_000,)


@click.command("search", short_help="Face search and clustering at N faces (brute force, vector index).")
@click.argument("counts", nargs=-1, metavar="[N,N,...]")
@json_option('instead of tables: {"search": [...], "clustering": [...]}.')
def command(counts, as_json):
    """Time face search and clustering at N faces, for each N (default 10000; 100000 and 1000000 on request;
    comma- or space-separated).

    Brute force: 20 queries for the top 10 photos (two faces a photo) over N random 512-d unit vectors, after one
    to warm the caches: the matrix's size, the query's median and p90 ms, and the matrix-vector product alone.

    Clustering, for 128-d and 512-d seeded synthetic identities (20 faces a person, noise 0.05 a coordinate at
    128-d, as long a noise vector at 512-d), each in a child
    process of its own: `cluster --all` (k-NN graph components) over N faces, the vector index built, saved and
    opened, N/10 more faces (at most 10,000) placed as a plain `cluster` does, search p50/p99 ms through the index
    and its recall@10 against brute force, the index's size on disk, the child's peak memory, and purity / ARI of
    both clusterings against the true identities. `--json`: {"search": [{"faces", "dim", "matrix_mb",
    "median_ms", "p90_ms", "product_ms"}], "clustering": [{"faces", "dim", "full_s", "full_purity", "full_ari",
    "index_build_s", "index_mb", "open_s", "new", "incremental_s", "inc_purity", "inc_ari", "kind",
    "search_p50_ms", "search_p99_ms", "recall10", "peak_mb"}]}.

    The old spelling `facerun bench --search [N,N,...]` runs this too."""
    search(parse_counts(",".join(counts), "bench search") if counts else DEFAULT_COUNTS, as_json)


def parse_counts(text: str, what: str) -> tuple[int, ...]:
    """'10000, 100000' -> (10000, 100000); `what` names the argument in the message."""
    try:
        counts = tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        raise InputError(f"{what} takes face counts like 10000,100000, not '{text}'") from None
    if any(n < 1 for n in counts):
        raise InputError(f"{what} takes face counts of at least 1, not '{text}'")
    return counts


def search(counts: tuple[int, ...], as_json: bool) -> None:
    from ..people.scale import bench_scale
    from ..people.search import bench_search
    from .search import print_bench

    brute = bench_search(counts)
    clustering = bench_scale(counts)
    if as_json:
        click.echo(json_dumps({"search": brute, "clustering": clustering}, indent=2))
        return
    print_bench(brute, False)
    ok = [r for r in clustering if "error" not in r]
    for r in clustering:
        if "error" in r:
            out.print(f"{r['faces']:,} faces, {r['dim']}-d: {r['error']}", markup=False)
    groups = Table(title="clustering, synthetic identities (20 faces a person)", title_justify="left")
    for name in ("faces", "dim", "--all", "purity", "ARI", "+new", "placed", "purity ", "ARI ", "peak"):
        groups.add_column(name, justify="right")
    for r in ok:
        groups.add_row(f"{r['faces']:,}", str(r["dim"]), f"{r['full_s']:.2f} s", f"{r['full_purity']:.3f}",
                       f"{r['full_ari']:.3f}", f"{r['new']:,}", f"{r['incremental_s']:.2f} s",
                       f"{r['inc_purity']:.3f}", f"{r['inc_ari']:.3f}", f"{r['peak_mb']:.0f} MiB")
    out.print(groups)
    index = Table(title="the vector index (stored faces with fresh noise as queries)", title_justify="left")
    for name in ("faces", "dim", "kind", "on disk", "open", "search p50", "p99", "recall@10"):
        index.add_column(name, justify="left" if name == "kind" else "right")
    for r in ok:
        index.add_row(f"{r['faces'] + r['new']:,}", str(r["dim"]), r["kind"], f"{r['index_mb']:.0f} MiB",
                      f"{r['open_s'] * 1000:.0f} ms", f"{r['search_p50_ms']:.2f} ms", f"{r['search_p99_ms']:.2f} ms",
                      f"{r['recall10']:.3f}")
    out.print(index)
