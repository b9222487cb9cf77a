"""How --help names values, one way across commands: arguments by their name alone
(``STORE``, ``INPUT...``), option values as ``<path>``, ``<int>``, ``<list>``, ``<a|b|c>``,
and defaults as ``[default: 0]`` (Typer writes a default given as text in parentheses)."""

from __future__ import annotations

from typing import Any

# The label of a text option's value, by the option's parameter name (the same name means
# the same kind of value in every command); a text option not listed is <text>.
TEXT_LABELS = {
    "output": "path", "store": "path", "pairs": "path", "against": "path", "items": "path",
    "knn_graph": "path", "labels": "folder|path", "stats_path": "path",
    "model": "name", "encoder": "name", "pretrained": "tag",
    "image_column": "column", "label_column": "column",
    "relation": "instance|label|pairs:FILE",
    "fn_rules": "list", "metrics": "list", "knn_k": "list", "recall_k": "list",
    "map_methods": "list", "checks": "list", "fn_cluster_k": "auto|list",
}
# a relation without a pair table (train takes the table as --pairs)
COMMAND_LABELS = {("train", "relation"): "instance|label"}


# the arguments whose value is a path (a store, a folder, a file; search: an image query)
PATH_ARGUMENTS = {"images", "embeddings", "store", "inputs", "directory", "queries"}


def takes_path(param: Any) -> bool:
    """True for an argument in :data:`PATH_ARGUMENTS` and an option labelled ``<path>`` or
    ``<folder|path>``."""
    if param.param_type_name == "argument":
        return param.name in PATH_ARGUMENTS
    return "path" in (param.metavar or param.display_type(None))


def refuse_empty_paths(params: list[Any], values: dict[str, Any]) -> None:
    """UsageError naming the first path argument or option whose raw value (``values``: the
    parser's strings by parameter name) is empty: ``Path("")`` is the current folder, and an
    unset shell variable would make it the input or the output."""
    from pairkit.errors import UsageError

    for param in params:
        given = values.get(param.name)
        if takes_path(param) and "" in (given if isinstance(given, (list, tuple)) else [given]):
            name = (argument_label(param).strip("[].") if param.param_type_name == "argument"
                    else max(param.opts, key=len))
            raise UsageError(f"{name}: an empty path (an unset shell variable?)")


def value_label(command: str, param: Any) -> str | None:
    """The ``<...>`` label of an option's value (None: a flag, or a label set by hand)."""
    if param.metavar is not None or getattr(param, "is_flag", False):
        return None
    label = param.display_type(None)  # Typer's <int>, <float>, <a|b>, <path>, <str>, <list[str]>
    if label in ("<str>", "<list[str]>"):
        name = COMMAND_LABELS.get((command, param.name)) or TEXT_LABELS.get(param.name, "text")
        return f"<{name}>"
    return label


def argument_label(param: Any) -> str:
    """An argument as the usage line and the help row show it: STORE, INPUT..., [QUERY]..."""
    name = (param.metavar or param.name).strip("[].").upper()
    if not param.required:
        name = f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def plain_default(param: Any, text: str) -> str:
    """``[default: (0)]`` -> ``[default: 0]`` for a default given as text."""
    shown = getattr(param, "show_default", None)
    if isinstance(shown, str):
        return text.replace(f"default: ({shown})", f"default: {shown}")
    return text


def label_params(command: str, params: list[Any]) -> None:
    """Give every option of a command its value label (arguments keep their names)."""
    for param in params:
        if param.param_type_name == "option":
            label = value_label(command, param)
            if label is not None and label != param.display_type(None):
                param.metavar = label


def format_params(ctx: Any, params: list[Any], formatter: Any) -> None:
    """The Arguments and Options sections of --help, labelled as above."""
    arguments, options = [], []
    for param in params:
        record = param.get_help_record(ctx)
        if record is None:
            continue
        name, text = record
        text = plain_default(param, text)
        if param.param_type_name == "argument":
            arguments.append((argument_label(param), text))
        else:
            options.append((name, text))
    for title, rows in (("Arguments", arguments), ("Options", options)):
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


def usage_pieces(ctx: Any, command: Any) -> list[str]:
    """The usage line after the command's name: ``[OPTIONS] STORE [QUERY]...``."""
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            pieces.append(argument_label(param))
    return pieces
