"""The `dlrmsim` command line: one sub-command per study a user runs; every input error is one line and exit 2."""

from __future__ import annotations

import importlib
import sys
from contextlib import nullcontext
from pathlib import Path

import click
import typer
from rich.markup import escape
from typer.core import TyperGroup

from dlrmsim.allocator import steady_allocator
from dlrmsim.collector import gc_paused
from dlrmsim.errors import EXIT_INTERRUPTED, EXIT_USAGE, DlrmsimError, Interrupted
from dlrmsim.output import err_console

# Sub-command -> the subsystem module whose ``register(app)`` adds it. Modules are imported only for the command
# being run (their imports cost up to a second); listing the commands (``dlrmsim --help``) imports them all. A
# command missing here still works, only slower: an unknown name loads every module before giving up.
SUBCOMMANDS: dict[str, str] = {
    "workload": "dlrmsim.workloads.cli",
    "topology": "dlrmsim.topologies.cli",
    "simulate": "dlrmsim.training.cli",
    "scaling": "dlrmsim.studies.cli",
    "serve": "dlrmsim.serving.cli",
    "instances": "dlrmsim.instances.cli",
    "calibrate": "dlrmsim.calibration.cli",
    "validate": "dlrmsim.calibration.cli",
    "agreement": "dlrmsim.calibration.cli",
    "evidence": "dlrmsim.calibration.cli",
    "sweep": "dlrmsim.studies.cli",
    "report": "dlrmsim.studies.cli",
    "study": "dlrmsim.studies.cli",
    "schema": "dlrmsim.schema_cli",
}
MODULES: tuple[str, ...] = tuple(dict.fromkeys(SUBCOMMANDS.values()))


class LazyGroup(TyperGroup):
    """The root command group: imports a subsystem's cli module when one of its commands is first asked for."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._loaded: set[str] = set()

    def _load(self, module: str) -> None:
        if module in self._loaded:
            return
        self._loaded.add(module)
        sub = typer.Typer()
        importlib.import_module(module).register(sub)
        for name, cmd in typer.main.get_group(sub).commands.items():
            self.commands.setdefault(name, cmd)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module = SUBCOMMANDS.get(cmd_name)
            for m in [module] if module else MODULES:
                self._load(m)
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for m in MODULES:
            self._load(m)
        order = {name: i for i, name in enumerate(SUBCOMMANDS)}
        return sorted(self.commands, key=lambda name: order.get(name, len(order)))


app = typer.Typer(
    cls=LazyGroup,
    help="dlrmsim: what-if performance studies of DLRM training and serving clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """dlrmsim: what-if performance studies of DLRM training and serving clusters."""
    # (a callback keeps the root a group of LazyGroup while `demo` is its only eager command)


@app.command()
def demo(
    out: str = typer.Option("out", help="folder for report.html"),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="simulation processes (1: in this process; default: one per core, up to 4)"
    ),
) -> None:
    """The headline study: Small, Large and MLPerf strong scaling on clx-64s-opa and skx-8s-upi."""
    from dlrmsim.studies.demo import run_demo

    run_demo(Path(out), workers=workers)


# Typer >= 0.26 raises its own vendored click's exceptions; older ones raise click's. Catch both.
_EXIT = tuple({click.exceptions.Exit, typer.Exit})
_ABORT = tuple({click.exceptions.Abort, typer.Abort})
_USAGE = tuple({click.ClickException, getattr(typer, "TyperException", click.ClickException)})


# Commands that time real kernels on this machine, which choose their allocator state themselves: calibration sets the
# steady one for its kernels, validate times TorchRec under glibc's defaults, as a user's script runs
# (benchmarks/bench_allocator_faults.py measures the difference).
HOST_COMMANDS = ("calibrate", "validate")


# Commands that import the simulation stack and then simulate once (or not at all), which the engine does with the
# collector paused anyway (Simulation.run): they run whole with it paused, which spares the imports' 0.1-0.15 s of
# collector passes (dlrmsim.collector). Not the commands that simulate many points in one process (scaling, serve's
# searches, instances, demo, study, sweep): a simulation leaves objects in reference cycles that only the collector
# frees (8 points of 128-rank MLPerf in one process with it off: peak RSS grew 12 MB a point, with it on not at all),
# nor those that time real kernels (calibrate, validate).
PAUSED_COLLECTOR_COMMANDS = ("simulate", "workload", "topology", "schema")


def command_of(argv: list[str]) -> str | None:
    """The command in ``argv``: its first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def measures_host(argv: list[str]) -> bool:
    """Whether the command in ``argv`` is one of :data:`HOST_COMMANDS`."""
    return command_of(argv) in HOST_COMMANDS


def _ctrl_c_in_compiled_code(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C arriving in compiled code: CPython reports a KeyboardInterrupt raised under a numba
    kernel as the cause of a SystemError ("returned a result with an exception set"), once per compiled frame."""
    while isinstance(exc, SystemError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return isinstance(exc, KeyboardInterrupt)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning user errors into one line and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    if not measures_host(args):
        steady_allocator()  # large arrays freed during a run are reused, not mapped afresh (see dlrmsim.allocator)
    try:
        with gc_paused() if command_of(args) in PAUSED_COLLECTOR_COMMANDS else nullcontext():
            code = app(args=argv, standalone_mode=False)
    except SystemError as exc:
        if not _ctrl_c_in_compiled_code(exc):
            raise
        code = EXIT_INTERRUPTED
    except Interrupted as exc:
        err_console.print(exc.one_line(), highlight=False, soft_wrap=True, markup=False)
        sys.exit(exc.exit_code)
    except DlrmsimError as exc:
        err_console.print(f"[bold red]error:[/] {escape(exc.one_line())}", highlight=False, soft_wrap=True)  # "[..]" is text
        sys.exit(EXIT_USAGE)
    except _EXIT as exc:
        sys.exit(exc.exit_code)
    except _USAGE as exc:
        # One line, like every other input error (click's own report is usage + hint + error on four lines).
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path.replace(ctx.find_root().info_name or "", "dlrmsim", 1) if ctx is not None else "dlrmsim"
        err_console.print(
            " ".join(f"error: {message} (fix: see {where} --help)".split()), highlight=False, soft_wrap=True, markup=False
        )
        sys.exit(EXIT_USAGE)
    except _ABORT:
        err_console.print("aborted")
        sys.exit(EXIT_INTERRUPTED)
    if code == EXIT_INTERRUPTED:
        # Typer turns Ctrl-C into Exit(130), which standalone_mode=False hands back as the return value: without this
        # the command stopped silently with exit code 0
        err_console.print("interrupted (Ctrl-C)")
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
