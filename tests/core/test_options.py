"""The option checks shared by the commands and the API (pairkit/core/options.py), as
units: mutation audit 4a (OP5-OP8)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pairkit.core.options import (
    check_value,
    check_values,
    parse_all_or_int,
    parse_choices,
    parse_int_list,
)
from pairkit.errors import UsageError

CHOICES = ("knn", "recall", "map")


def test_parse_choices_all_and_auto_mean_every_one() -> None:
    for text in (None, "all", "auto", " all "):
        assert parse_choices(text, CHOICES, "--metrics") is None
    assert parse_choices("recall, knn", CHOICES, "--metrics") == ("recall", "knn")
    with pytest.raises(UsageError, match="--metrics must not be empty"):
        parse_choices(" , ", CHOICES, "--metrics")
    with pytest.raises(UsageError, match="--metrics must be a comma list of knn, recall, "
                                         "map, got 'mrr'"):
        parse_choices("knn,mrr", CHOICES, "--metrics")


def test_parse_int_list_and_all_or_int() -> None:
    assert parse_int_list("1, 5,10", "--knn-k") == [1, 5, 10]
    with pytest.raises(UsageError, match="--knn-k must not be empty"):
        parse_int_list(",", "--knn-k")
    with pytest.raises(UsageError, match="--knn-k lists 5 twice"):
        parse_int_list("5,1,5", "--knn-k")
    assert parse_all_or_int("ALL", "--x") is None and parse_all_or_int("0", "--x") == 0
    with pytest.raises(UsageError, match=r"--x must be all or >= 0 \(0: none\), got -1"):
        parse_all_or_int("-1", "--x")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_float_option_must_be_finite(value: float) -> None:
    with pytest.raises(UsageError, match="--min-score must be a number"):
        check_value("--min-score", value)


def test_check_values_names_the_long_option() -> None:
    """A parameter's minimum is looked up by its longest name (``-s/--seed``: ``--seed``)."""
    command = SimpleNamespace(params=[SimpleNamespace(name="seed", opts=["-s", "--seed"])])
    check_values(command, {"seed": 0})
    with pytest.raises(UsageError, match="--seed must be >= 0, got -1"):
        check_values(command, {"seed": -1})
    with pytest.raises(UsageError, match=r"--seed must be < 2\*\*63"):
        check_values(command, {"seed": 2**63})
