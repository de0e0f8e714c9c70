"""`facerun bench`: a group of benchmarks. `bench models` (what a bare `facerun bench [MODEL ...]` runs), `bench photos
DIR`, `bench search`, `bench compare A.json B.json`, `bench plot SAVED.json`; the old spellings --photos, --search and
--compare still work."""

from __future__ import annotations

import click

from . import bench_compare, bench_models, bench_photos, bench_plot, bench_search
from .bench_models import OLD_SPELLINGS

DEFAULT = "models"


class BenchGroup(click.Group):
    """A group whose first argument may be a subcommand or anything `bench models` takes: a bare `facerun bench
    [MODEL ...] [OPTIONS]` (and `facerun bench --models DIR`, `--photos DIR`, ...) runs `bench models` as before the
    group existed. A model named like a subcommand is still reached as `facerun bench models NAME`."""

    def parse_args(self, ctx, args):
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [DEFAULT, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "[MODEL]... [OPTIONS]")
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="       ")

    def format_options(self, ctx, formatter):
        """The subcommands, then the options of `bench models`: a bare `facerun bench` takes them."""
        self.format_commands(ctx, formatter)
        default = self.commands[DEFAULT]
        options = [p for p in default.get_params(ctx) if isinstance(p, click.Option)]  # click 8.5 lists arguments too
        records = [r for r in (p.get_help_record(ctx) for p in options) if r is not None]
        with formatter.section(f"Options of 'bench {DEFAULT}' (what a bare 'facerun bench' runs)"):
            formatter.write_dl(records)


@click.group("bench", cls=BenchGroup, epilog=OLD_SPELLINGS)
def command():
    """Benchmarks: models path by path (CPU, GPU, peers) with their parity, the library run over a folder of photos,
    brute-force search, two saved runs compared, and charts (--plot FILE.png|.svg, or `bench plot SAVED.json`).

    A bare `facerun bench [MODEL ...] [OPTIONS]` runs `bench models`. Each subcommand's --help says more; each but
    `plot` takes --json."""


command.add_command(bench_models.command)
command.add_command(bench_photos.command)
command.add_command(bench_search.command)
command.add_command(bench_compare.command)
command.add_command(bench_plot.command)
