"""The false-negative config of ``pairkit mine``, built from its ``--fn-*`` options."""

from __future__ import annotations

from typing import Any

from pairkit.core.options import parse_int_list


def fn_config(filter_fn: bool, rules: str | None, cluster_k: str | None,
              **params: Any) -> Any:
    """The FalseNegativeConfig for the ``--fn-*`` options (None without filtering);
    ``params`` left None take the config's defaults."""
    if not filter_fn:
        return None
    from pairkit.mine.false_negatives import FalseNegativeConfig, parse_rules

    fields: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
    if rules is not None:
        fields["rules"] = parse_rules(rules)
    if cluster_k is not None and cluster_k.strip().lower() != "auto":
        fields["cluster_ks"] = tuple(parse_int_list(cluster_k, "--fn-cluster-k"))
    return FalseNegativeConfig(**fields)
