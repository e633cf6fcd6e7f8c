"""The `dlrmsim` command line: one sub-command per study a user runs; every input error is one line and exit 2."""

from __future__ import annotations

import sys

import click
import typer

from dlrmsim.errors import EXIT_USAGE, DlrmsimError
from dlrmsim.output import err_console
from dlrmsim.workloads.cli import app as workload_app

app = typer.Typer(
    help="dlrmsim: what-if performance studies of DLRM training and serving clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(workload_app, name="workload")


def _register_optional() -> None:
    """Attach the sub-commands of the other subsystems (each module owns its own commands)."""
    import importlib

    for module in (
        "dlrmsim.topologies.cli",
        "dlrmsim.simulator.cli",
        "dlrmsim.simulator.serving_cli",
        "dlrmsim.simulator.instances_cli",
        "dlrmsim.calibration.cli",
        "dlrmsim.studies.cli",
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(app)


_register_optional()


@app.command()
def demo(out: str = typer.Option("out", help="folder for report.html")) -> None:
    """The headline study: Small, Large and MLPerf strong scaling on clx-64s-opa and skx-8s-upi."""
    from pathlib import Path

    from dlrmsim.studies.demo import run_demo

    run_demo(Path(out))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning user errors into one line and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except DlrmsimError as exc:
        err_console.print(f"[bold red]error:[/] {exc.one_line()}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)


if __name__ == "__main__":
    main()
