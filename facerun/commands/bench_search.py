"""`facerun bench search [N,N,...]`: how long a brute-force face search takes over N faces."""

from __future__ import annotations

import click

from ..errors import InputError
from .options import json_option

DEFAULT_COUNTS = (10_000, 100_000, 1_000_000)


@click.command("search", short_help="Brute-force face search's query time over N faces.")
@click.argument("counts", nargs=-1, metavar="[N,N,...]")
@json_option('instead of tables: {"search": [...]}.')
def command(counts, as_json):
    """Time brute-force face search: the query time over N random 512-d unit vectors, for each N (default
    10000,100000,1000000; comma- or space-separated).

    Each size runs 20 queries for the top 10 photos (two faces a photo) after one to warm the caches. Columns: faces,
    dim, the matrix's size, the query's median and p90 ms, and the matrix-vector product alone. `--json`:
    {"search": [{"faces", "dim", "matrix_mb", "median_ms", "p90_ms", "product_ms"}]}.

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
    from ..people.search import bench_search
    from .search import print_bench

    print_bench(bench_search(counts), as_json)
