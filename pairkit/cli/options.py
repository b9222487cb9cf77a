"""The options every command shares, spelled one way (docs/development.md): value types,
``--device`` and table ``-o`` parsers (bad values are bad usage, exit 2), and the command
class that names the replacement of an old option spelling."""

from __future__ import annotations

from typing import Any, Literal

import typer
from typer.core import TyperCommand, TyperGroup

from pairkit.cli import help_labels
from pairkit.cli.common import fail
from pairkit.core.terminate import stop_line
from pairkit.errors import PairkitError, UsageError

IndexKind = Literal["auto", "flat", "ivf", "ivfpq", "hnsw"]
Dtype = Literal["float16", "float32"]
FnMode = Literal["eliminate", "attract", "keep"]
Backend = Literal["auto", "faiss", "torch"]


def _bad_parameter(check: Any, text: str) -> Any:
    """``check(text)``, a UsageError turned into Typer's bad-parameter error (exit 2)."""
    try:
        return check(text)
    except UsageError as exc:
        raise typer.BadParameter(str(exc)) from None


def device_value(text: str, here: bool = True) -> str:
    """``--device``: auto, cpu, cuda or cuda:N (bad usage, exit 2, otherwise); ``here``: a
    GPU device on a machine that has none is a failure (exit 1), before any heavy import
    (the commands with ``--ray`` leave it to :func:`pairkit.core.devices.where_it_runs`)."""
    from pairkit.core.devices import check_device, check_gpu_present

    value = _bad_parameter(check_device, text)
    return check_gpu_present(value) if here else value


def device_option(help: str, here: bool = True) -> Any:
    """The ``--device`` option of every command (``here`` False: those with ``--ray``)."""
    return typer.Option("auto", "--device", parser=lambda text: device_value(text, here),
                        metavar="<auto|cpu|cuda|cuda:N>", help=help)


def backend_option() -> Any:
    """The ``--backend`` option of the commands that search (mine, dedup, eval)."""
    return typer.Option(
        "auto", "--backend",
        help="Search engine: auto (FAISS GPU indices when faiss-gpu sees a GPU, else the exact "
        "torch search on CUDA when torch sees one, else FAISS on the CPU), faiss or torch.")


def ray_option() -> Any:
    """The ``--ray ADDRESS`` option of embed, mine, dedup and eval (docs/distributed.md)."""
    return typer.Option(
        None, "--ray", envvar="PAIRKIT_RAY_ADDRESS", metavar="<address>", show_envvar=True,
        help="Run on a Ray cluster (pip install 'pairkit[ray]'): local (start one on this "
        "machine), auto (join the running one) or HOST:PORT; same results as without.")


def table_output_option(default: Any = "-") -> Any:
    """The ``-o`` option of a command that writes a table."""
    return typer.Option(default, "-o", "--output", parser=table_output,
                        help="Table: .parquet, .csv, .jsonl (.ndjson, .json: JSON Lines too), "
                        "a folder ending in / (parquet parts), or - (JSON Lines on stdout).")


def table_output(text: str) -> str:
    """``-o`` of a table: ``-`` or a path ending in .parquet, .csv, .jsonl, .ndjson, .json."""
    from pairkit.core.options import table_output as check

    return _bad_parameter(check, text)


class Group(TyperGroup):
    """The ``pairkit`` group, its --help labelled as every command's (cli/help_labels.py)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        help_labels.format_params(ctx, self.get_params(ctx), formatter)
        self.format_commands(ctx, formatter)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:  # Ctrl-C while Click parses: one line, exit 130, as in a command (Typer: none)
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as exc:  # SIGTERM too: "terminated", 143
            raise fail(*stop_line(exc)) from None

    def invoke(self, ctx: Any) -> Any:
        try:  # ... or in a command, before or after its handler (user_errors)
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise fail(*stop_line(exc)) from None


class Command(TyperCommand):
    """A subcommand whose "no such option" error names the replacement of an old spelling,
    whose numeric options are checked (:func:`check_values`) and empty paths refused before
    it runs, and whose --help names values one way (cli/help_labels.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # arguments spelled one way in help: STORE, INPUT...
            if param.param_type_name == "argument" and param.metavar is None:
                param.metavar = param.name.upper()
        help_labels.label_params(self.name or "", self.params)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        help_labels.format_params(ctx, self.get_params(ctx), formatter)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return help_labels.usage_pieces(ctx, self)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        cx = click_exceptions()
        try:
            if not ctx.resilient_parsing and not set(args) & set(ctx.help_option_names):
                # "" before Click turns it into Path("."): the raw values of a first parse
                opts = self.make_parser(ctx).parse_args(args=list(args))[0]
                help_labels.refuse_empty_paths(self.params, opts)
            rest = super().parse_args(ctx, args)
            from pairkit.core.options import check_values

            check_values(self, ctx.params)
            return rest
        except UsageError as exc:
            raise cx.UsageError(str(exc), ctx) from None
        except PairkitError as exc:  # a failure found while parsing (no GPU): exit 1
            raise fail(str(exc)) from None
        except cx.NoSuchOption as exc:
            from pairkit.core.options import old_spelling

            message = old_spelling(exc.option_name)
            if message is None:
                raise
            raise cx.UsageError(message, ctx) from None


def click_exceptions() -> Any:
    """Click's exception module as Typer uses it (Typer >= 0.2x vendors Click)."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older Typer runs on Click itself
        from click import exceptions
    return exceptions
