"""Command-line interface: one module per subcommand."""

from __future__ import annotations


def entry() -> None:
    """The ``pairkit`` console script: :func:`pairkit.cli.main.main`, with Ctrl-C while
    the command line loads (typer and the commands import) one line, exit 130, as in a
    command; SIGTERM from here on stops it as Ctrl-C does (:mod:`pairkit.core.terminate`:
    ``error: terminated``, exit 143)."""
    from pairkit.core.terminate import exit_stopped, raise_on_sigterm

    try:
        raise_on_sigterm()
        from pairkit.cli.main import main
    except KeyboardInterrupt as exc:
        exit_stopped(exc)
    main()
