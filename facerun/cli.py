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
def main():
    """facerun: run and benchmark face networks (YuNet, SFace, AuraFace) on the CPU and on any GPU.

    MODEL arguments take a path to an .onnx file or a built-in replica name (every-op, yunet-arch, sface-arch,
    auraface-arch, and their -small variants), so nothing needs downloading.
    """


if __name__ == "__main__":
    main()
