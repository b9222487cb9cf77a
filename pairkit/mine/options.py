"""The false-negative and mined-positive configs of ``pairkit mine``, built from its
``--fn-*`` and ``--positive*`` options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pairkit.core.options import parse_int_list

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.positives import PositiveConfig


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


def positive_config(per_anchor: int | None, neighbours: int,
                    fn: FalseNegativeConfig | None,
                    whitening: float | None = None) -> PositiveConfig | None:
    """``--positives`` / ``--positive-neighbours`` / ``--positive-whitening`` as a config
    (None: no mined positives).
    Default: mined positives with the false-negative filter (the same rules' verdicts made
    useful to training), none without it (naive mining stays naive)."""
    from pairkit.mine.positives import DEFAULT_PER_ANCHOR, PositiveConfig
    from pairkit.mine.whitening import DEFAULT_POWER

    if per_anchor is None:
        per_anchor = DEFAULT_PER_ANCHOR if fn is not None else 0
    cfg = PositiveConfig(per_anchor=per_anchor, neighbours=neighbours,
                         whitening=DEFAULT_POWER if whitening is None else whitening)
    cfg.check()
    return cfg if per_anchor > 0 else None
