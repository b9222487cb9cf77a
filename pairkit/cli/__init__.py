"""Command-line interface: one module per subcommand."""

from __future__ import annotations


def entry() -> None:
    """The ``pairkit`` console script: :func:`pairkit.cli.main.main`, with Ctrl-C while
    the command line loads (typer and the commands import) one line, exit 130, as in a
    command."""
    import sys

    try:
        from pairkit.cli.main import main
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    main()
