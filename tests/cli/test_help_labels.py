"""Every command's --help spells values one way (issue 20.13): arguments by name alone,
option values as ``<path>``, ``<int>``, ``<list>``, ``<a|b|c>``, defaults as
``[default: 0]`` without parentheses."""

from __future__ import annotations

import re

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from pairkit.cli.main import app

runner = CliRunner()
COMMANDS = sorted(get_command(app).commands)  # type: ignore[attr-defined]
LABEL = re.compile(r"^<[a-z0-9|:,.+-]+(\|[A-Za-z:]+)*>$")


def help_of(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], prog_name="pairkit", terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def option_rows(text: str) -> dict[str, str]:
    """``{'--output': '<path>', ...}``: the value label of each option in a help text."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^  (?:-\w, )?(--[\w-]+)(?: (\S+))?(?:\s{2,}|$)", line)
        if match:
            rows[match.group(1)] = match.group(2) or ""
    return rows


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_spells_values_one_way(command: str | None) -> None:
    text = help_of(*([command] if command else []))
    flat = " ".join(text.split())  # a default may wrap over two lines
    assert "default: (" not in flat, flat
    assert "[str]" not in text and "<str>" not in text and "list[" not in text, text
    usage = text.split("\n\n")[0]
    assert "{" not in usage and "[[" not in usage, usage
    rows = option_rows(text)
    assert rows, text
    for option, label in rows.items():
        assert label == "" or LABEL.match(label), (command, option, label)


@pytest.mark.parametrize("command", COMMANDS)
def test_arguments_are_named_without_a_type(command: str) -> None:
    text = help_of(command)
    section = text.split("Arguments:\n")[1].split("\n\n")[0]
    for line in section.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            name = line.split()[0]
            assert re.fullmatch(r"\[?[A-Z]+\]?(\.\.\.)?", name), (command, line)
            assert "<" not in line.split("  ")[1], (command, line)


def test_paths_are_labelled_path() -> None:
    """Every option that takes a file, folder or store is ``<path>``, whatever its type."""
    for command in COMMANDS:
        rows = option_rows(help_of(command))
        for option in ("--output", "--store", "--pairs", "--against", "--head", "--items",
                       "--checkpoint", "--stats", "--plot"):
            if option in rows and (command, option) != ("train", "--head"):  # an architecture
                assert rows[option] == "<path>", (command, option, rows[option])


def test_labels_say_what_a_value_is() -> None:
    assert option_rows(help_of("mine"))["--device"] == "<auto|cpu|cuda|cuda:N>"
    assert option_rows(help_of("mine"))["--ray"] == "<address>"
    assert option_rows(help_of("mine"))["--fn-rules"] == "<list>"
    assert option_rows(help_of("eval"))["--knn-k"] == "<list>"
    assert option_rows(help_of("search"))["--text"] == "<text>"
    assert option_rows(help_of("embed"))["--model"] == "<name>"
    assert option_rows(help_of("train"))["--head"] == "<residual|linear|mlp>"


def test_defaults_without_parentheses() -> None:
    flat = " ".join(help_of("mine").split())
    assert "--range-min <int> First valid-candidate rank to use (0 = hardest). " \
           "[default: 0]" in flat
    assert "[default: instance when sources have several views, else label when " \
           "labeled]" in flat
    assert "[default: 5]" in flat  # a plain default stays as it was
    usage = help_of("report").splitlines()[0]
    assert usage == "Usage: pairkit report [OPTIONS] INPUT...", usage
    usage = help_of("search").splitlines()[0]
    assert usage == "Usage: pairkit search [OPTIONS] STORE [QUERY]...", usage


def test_embed_views_says_what_the_option_counts() -> None:
    """Found by a bug hunt (hunt-s 5): "Views per image: 0 is plain, 1.. augmented." read as
    if --views 0 meant the plain image alone; the command takes 1 and more
    (docs/embed.md)."""
    flat = " ".join(help_of("embed").split())
    assert "--views <int> Views per image, 1 or more: view 0 is the plain image, views 1.. " \
           "random augmentations. [default: 1]" in flat, flat
