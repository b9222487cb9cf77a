"""The ``pairkit`` command: a Typer app with one module per subcommand.

Subcommand modules import only light modules at top level; torch, faiss and
open_clip are imported inside the functions that need them, so ``--help`` is
instant.
"""

from __future__ import annotations

import sys

import typer

from pairkit import __version__
from pairkit.cli import dedup as dedup_cmd
from pairkit.cli import demo as demo_cmd
from pairkit.cli import embed as embed_cmd
from pairkit.cli import eval as eval_cmd
from pairkit.cli import import_ as import_cmd
from pairkit.cli import index as index_cmd
from pairkit.cli import info as info_cmd
from pairkit.cli import issues as issues_cmd
from pairkit.cli import mine as mine_cmd
from pairkit.cli import project as project_cmd
from pairkit.cli import report as report_cmd
from pairkit.cli import search as search_cmd
from pairkit.cli import train as train_cmd
from pairkit.cli.common import show_one_line, to_devnull
from pairkit.cli.options import Command, Group, click_exceptions
from pairkit.core.terminate import exit_stopped

# usage errors in pairkit's one-line style (`error: ...`, exit 2), like every other error
click_exceptions().UsageError.show = show_one_line

app = typer.Typer(
    name="pairkit",
    cls=Group,
    help=(
        "Contrastive-learning data toolkit: embed image folders, mine hard negatives, "
        "flag false negatives and near-duplicates, train heads, evaluate.\n\n"
        "Start here: pairkit demo demo-run  (the whole pipeline on sample data, offline)\n\n"
        "Example: pairkit embed photos/ -o store --model pixels && "
        "pairkit mine store --hard --filter-false-negatives -o pairs.parquet"
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (docs/cli.md)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pairkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True,
        help="Print the version and exit."
    ),
    threads: int | None = typer.Option(
        None, "--threads", show_default="$PAIRKIT_THREADS, $OMP_NUM_THREADS or half the CPUs, 1-8",
        help="CPU threads for torch, FAISS, BLAS and image decoding together."),
) -> None:
    """pairkit command line."""
    from pairkit.cli.common import user_errors
    from pairkit.core.threads import configure

    with user_errors():
        configure(threads)


# in pipeline order, as `pairkit --help` lists them
for _name, _function in (
    ("embed", embed_cmd.embed), ("import", import_cmd.import_store), ("index", index_cmd.index),
    ("mine", mine_cmd.mine), ("dedup", dedup_cmd.dedup), ("issues", issues_cmd.issues),
    ("train", train_cmd.train),
    ("project", project_cmd.project), ("eval", eval_cmd.eval_store),
    ("search", search_cmd.search), ("info", info_cmd.info),
    ("report", report_cmd.report), ("demo", demo_cmd.demo),
):
    app.command(_name, no_args_is_help=True, cls=Command)(_function)


def main() -> None:
    """Console entry point."""
    try:
        app()
    except KeyboardInterrupt as exc:  # outside a command's handler: while parsing, or after it
        exit_stopped(exc)
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): not an error.
        to_devnull(1)
        sys.exit(0)
