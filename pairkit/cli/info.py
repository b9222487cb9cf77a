"""pairkit info: what a store holds and whether its checksums hold."""

from __future__ import annotations

import json

import typer

from pairkit.cli.common import say, user_errors


def info(
    store: str = typer.Argument(
        ..., help="Store folder or URL (s3://...; from embed or import)."),
    no_verify: bool = typer.Option(
        False, "--no-verify", help="Skip reading every byte for the sha256 checks."),
    json_out: bool = typer.Option(False, "--json", help="Print the facts as JSON on stdout."),
) -> None:
    """Describe a store: rows, sources, views, dim and dtype, encoder, labels, file sizes,
    format version, saved indexes, and whether every file matches its checksum (a damaged
    store is an error, exit 1).

    Example: pairkit info store --json
    """
    from pairkit.core.info import info_lines, store_info

    with user_errors():
        facts = store_info(store, verify=not no_verify)
        if json_out:
            typer.echo(json.dumps(facts))
        else:
            for line in info_lines(facts):
                say(line)
