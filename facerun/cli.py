"""The `facerun` command line: a thin layer over the Python API. Each command lives in `facerun/commands/`."""

from __future__ import annotations

import importlib
import os
import sys

import click

from .errors import FacerunError

# command name -> module in facerun.commands (each defines a click command named `command`)
COMMANDS = {
    "inspect": "inspect",
    "parity": "parity",
    "models": "models",
    "detect": "detect",
    "evaluate": "evaluate",
    "embed": "embed",
    "compare": "compare",
    "adapter": "adapter",
    "bench": "bench",
    "tune": "tune",
    "index": "index",
    "identify": "identify",
    "cluster": "cluster",
    "search": "search",
}


class FacerunGroup(click.Group):
    """Loads commands lazily (start-up stays fast) and turns facerun errors into one line and exit status 1."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"facerun.commands.{module}").command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FacerunError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except Exception as e:  # a bug: still one line for the user, the traceback on request
            if os.environ.get("FACERUN_DEBUG"):
                raise
            click.echo(f"error: internal error ({type(e).__name__}: {e}); run with FACERUN_DEBUG=1 for the traceback", err=True)
            sys.exit(2)


@click.group(cls=FacerunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="facerun")
@click.option("--gpu-concurrency", type=click.IntRange(1, None), default=None,
              help="At most this many GPU runs at once (default: no limit).")
@click.option("--gpu-share", type=click.FloatRange(0.05, 1.0), default=None,
              help="Keep the GPU busy at most this share of the time: after a run of t, rest t*(1-F)/F (default 1).")
@click.option("--allow-software", "allow_software", is_flag=True,
              help="Accept a software GPU adapter (llvmpipe/lavapipe, WARP, SwiftShader); FACERUN_ALLOW_SOFTWARE=1 too.")
def main(gpu_concurrency, gpu_share, allow_software):
    """facerun: run and benchmark face networks (YuNet, SFace, AuraFace) on the CPU and on any GPU.

    MODEL arguments take a path to an .onnx file, a known model's name (yunet-2023mar, sface-2021dec, ...) or a
    built-in replica name (every-op, yunet-arch, sface-arch, auraface-arch, and their -small variants), so nothing
    needs downloading.
    """
    if gpu_concurrency is not None or gpu_share is not None or allow_software:
        from .gpu import allow_software as allow, set_pace

        if gpu_concurrency is not None or gpu_share is not None:
            set_pace(gpu_concurrency, gpu_share)
        if allow_software:
            allow(True)


if __name__ == "__main__":
    main()
