"""The `facerun` command line: a thin layer over the Python API. Each command lives in `facerun/commands/`."""

from __future__ import annotations

import contextlib
import importlib
import sys

import click

from . import settings
from .commands.common import accept_allow_software_after, allow_software_option
from .commands.types import FiniteRange
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

# the commands that can run on the GPU: each accepts --allow-software after its name too
GPU_COMMANDS = {"detect", "evaluate", "embed", "compare", "identify", "index", "search", "parity", "tune", "bench",
                "adapter"}

# what Ctrl-C leaves of a command's work, said on the way out (every other command writes its outputs whole at the
# end, so an interruption leaves nothing)
INTERRUPTED_KEEPS = {
    "index": "the photos committed so far stay in the database; the same command again carries on from there",
    "identify": "nothing was written but the known photos already committed to --known-db, which a re-run reuses",
    "detect": "the --draw drawings written so far stay, each whole; nothing else was written",
    "models": "a download stopped part-way resumes where it stopped when fetched again",
}


class FacerunGroup(click.Group):
    """Loads commands lazily (start-up stays fast) and turns facerun errors into one line and exit status 1."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        module = COMMANDS.get(name)
        if module is None:
            return None
        command = accept_globals_after(importlib.import_module(f"facerun.commands.{module}").command)
        return accept_allow_software_after(command) if name in GPU_COMMANDS else command

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's main, but a usage error is one `error:` line (with where to find help) and exit status 2."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        from .commands.common import EXIT_INTERRUPTED, EXIT_USAGE, fail

        _tolerant_streams()
        previous = _stop_on_signals()
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "facerun"
            fail(f"{e.format_message()} (see '{where} --help')", EXIT_USAGE)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.Abort:  # click's name for Ctrl-C (and EOF) during a prompt or its own parsing
            click.echo("interrupted", err=True)
            sys.exit(_interrupted_status(EXIT_INTERRUPTED))
        finally:
            _restore_signals(previous)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx):
        from .commands.common import EXIT_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_NO_GPU, Interrupted, fail
        from .errors import GpuError
        from .zoo import replicas

        notice = _ReplicaNotice()
        replicas.on_use(notice)
        try:
            try:
                result = super().invoke(ctx)
            except (click.exceptions.Exit, SystemExit):  # the command finished and said how (finish)
                notice.tell()
                raise
            notice.tell()
            return result
        except GpuError as e:
            fail(e, EXIT_NO_GPU)
        except FacerunError as e:
            fail(e, EXIT_FAILED)
        except OSError as e:  # the file system said no (a name too long, a full disk, a vanished file): not a bug
            if settings.get("FACERUN_DEBUG"):
                raise
            fail(_os_error_line(e), EXIT_FAILED)
        except KeyboardInterrupt as e:
            kept = str(e) if isinstance(e, Interrupted) and str(e) else \
                INTERRUPTED_KEEPS.get(ctx.invoked_subcommand, "nothing was written")
            click.echo(f"interrupted{_signal_said()}: {kept}", err=True)
            sys.exit(_interrupted_status(EXIT_INTERRUPTED))
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except Exception as e:  # a bug: still one line for the user, the traceback on request
            if settings.get("FACERUN_DEBUG"):
                raise
            fail(f"internal error ({type(e).__name__}: {e}); run with FACERUN_DEBUG=1 for the traceback", EXIT_INTERNAL)
        finally:
            from .zoo import find

            find.use_models_dir(None)  # a run's --models does not outlive it (the API and tests call main again)
            replicas.on_use(None)
            from . import limits

            limits.set_limit("FACERUN_MAX_TENSOR_MB", None)
            limits.set_limit("FACERUN_MAX_PIXELS", None)


# SIGTERM (a service manager, `kill`) and SIGHUP (the terminal closed) end a run as Ctrl-C does: the batch in flight
# is rolled back, the line says what stays, the exit status is 128 + the signal's number. A signal the parent set to
# be ignored (nohup) stays ignored.
_STOP_SIGNALS = ("SIGTERM", "SIGHUP")
_received: list[int] = []


def _on_stop_signal(signum, frame):
    _received.append(signum)
    raise KeyboardInterrupt


def _stop_on_signals() -> dict:
    import signal
    import threading

    previous = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    _received.clear()
    for name in _STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is signal.SIG_DFL:
            previous[number] = signal.signal(number, _on_stop_signal)
    return previous


def _restore_signals(previous: dict) -> None:
    import signal

    for number, handler in previous.items():
        signal.signal(number, handler)


def _signal_said() -> str:
    import signal

    return f" ({signal.Signals(_received[0]).name})" if _received else ""


def _interrupted_status(default: int) -> int:
    return 128 + _received[0] if _received else default


def _os_error_line(error: OSError) -> str:
    from .fsnames import shown

    what = error.strerror or str(error)
    return f"{shown(error.filename)}: {what}" if error.filename is not None else what


def _tolerant_streams() -> None:
    """A file name that is not UTF-8 reaching a print unescaped (facerun.fsnames.shown escapes the ones it knows of)
    is written as \\udcNN rather than failing the whole command on a strict UTF-8 stdout."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # a stream that cannot be reconfigured: leave it
                stream.reconfigure(errors="backslashreplace")


class _ReplicaNotice:
    """One stderr line per replica a run used, once the command is done (an error stays the only line): its weights
    are random, so only timings and parity mean anything."""

    def __init__(self):
        self.used: dict[str, str] = {}  # name -> kind, in the order first used

    def __call__(self, replica) -> None:
        self.used.setdefault(replica.name, replica.kind)

    def tell(self) -> None:
        from .commands.common import err

        for name, kind in self.used.items():
            what = {"detector": "its faces", "embedder": "its embeddings"}.get(kind, "its outputs")
            err.print(f"note: {name} is a built-in replica with random weights: {what} mean nothing, its timings "
                      "and parity do", markup=False, highlight=False)
        self.used.clear()


def _limit_callback(name: str):
    def apply(ctx, param, value):
        if value is not None:
            from . import limits

            limits.set_limit(name, value)  # the run's `finally` puts the variable's value back
        return value

    return apply


def _pace_callback(which: str):
    def apply(ctx, param, value):
        if value is not None:
            from .gpu.pace import get_pace, set_pace

            concurrency, share = get_pace()
            set_pace(value if which == "concurrency" else concurrency, value if which == "share" else share)
        return value

    return apply


def _global_options(hidden: bool) -> list[click.Option]:
    """The options every command takes, before its name (shown in `facerun --help`) or after it (hidden there, so
    each command's own --help stays its own): one definition for both places."""
    return [
        click.Option(["--gpu-concurrency"], type=click.IntRange(1, None), default=None, hidden=hidden,
                     expose_value=False, callback=_pace_callback("concurrency"),
                     help="At most this many GPU runs at once (default: no limit)."),
        click.Option(["--gpu-share"], type=FiniteRange(0.05, 1.0), default=None, hidden=hidden, expose_value=False,
                     callback=_pace_callback("share"),
                     help="Keep the GPU busy at most this share of the time: after a run of t, rest t*(1-F)/F "
                          "(default 1)."),
        click.Option(["--max-tensor-mb"], type=FiniteRange(min=0, min_open=True), default=None, metavar="MB",
                     hidden=hidden, expose_value=False, callback=_limit_callback("FACERUN_MAX_TENSOR_MB"),
                     help="Refuse a model asking for a tensor larger than this, before allocating it (default 4096; "
                          "FACERUN_MAX_TENSOR_MB too)."),
        click.Option(["--max-pixels"], type=FiniteRange(min=0, min_open=True), default=None, metavar="N",
                     hidden=hidden, expose_value=False, callback=_limit_callback("FACERUN_MAX_PIXELS"),
                     help="Refuse an image of more pixels than this, from its header, before decoding it (default "
                          "100000000; FACERUN_MAX_PIXELS too)."),
    ]


def accept_globals_after(command: click.Command) -> click.Command:
    """Give a command (and a group's subcommands) hidden copies of the global options it does not declare itself,
    so `facerun detect x.jpg --max-pixels N` means what `facerun --max-pixels N detect x.jpg` does."""
    own = {name for param in command.params for name in getattr(param, "opts", ())}
    command.params.extend(option for option in _global_options(hidden=True) if not own & set(option.opts))
    for sub in getattr(command, "commands", {}).values():
        accept_globals_after(sub)
    return command


@click.group(cls=FacerunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="facerun")
@allow_software_option()
def main(allow_software):
    """facerun: find, embed and match faces, and run and benchmark face networks on the CPU and on any GPU.
    Shipped, and the defaults on a fresh install: the YuNet detector and the MobileFaceNet embedder; the SFace
    and AuraFace embedders and five more detector families are known models to fetch (`facerun models list`).

    MODEL arguments take a path to an .onnx file, a known model's name (yunet-2023mar, sface-2021dec, ...) or a
    built-in replica name (every-op, yunet-arch, sface-arch, auraface-arch, and their -small variants), so nothing
    needs downloading. The global options may also follow the command's name.
    """
    settings.check_environment()  # a FACERUN_* value its setting refuses: one error line before any work


main.params[1:1] = _global_options(hidden=False)  # after --version, before --allow-software, as they always were


if __name__ == "__main__":
    main()
