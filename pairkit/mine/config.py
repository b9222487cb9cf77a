"""The options of ``pairkit mine``: those that shape the selection (:class:`MineConfig`)
and their checks, and the false-negative and mined-positive configs built from its
``--fn-*`` and ``--positive*`` options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pairkit.core.options import parse_int_list
from pairkit.errors import UsageError

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.positives import PositiveConfig

SAMPLINGS = ("top", "random", "softmax")
POSITIVE_CHOICES = ("weakest", "random")
FN_MODES = ("eliminate", "attract", "keep")


@dataclass(frozen=True)
class MineConfig:
    """Options of ``pairkit mine`` that shape the selection (see docs/mine.md)."""

    num_negatives: int = 5
    hard: bool = True
    range_min: int = 0
    range_max: int | None = None
    min_score: float | None = None
    max_score: float | None = None
    absolute_margin: float | None = None
    relative_margin: float | None = None
    sampling: str = "top"
    sampling_temperature: float = 0.05
    positive: str = "weakest"
    max_positives: int = 64
    seed: int = 0
    batch_size: int = 16384
    fn_mode: str = "eliminate"  # flagged candidates: eliminate, attract (positives) or keep
    max_k_entries: int = 1 << 24  # scores+ids held at once during retries (~200 MB)

    @property
    def keep_flagged(self) -> bool:
        """``--fn-mode keep``: flagged candidates stay negatives, marked in the table."""
        return self.fn_mode == "keep"

    def window(self) -> tuple[int, int]:
        """``(range_min, range_max)``: valid ranks to sample from. Default range_max:
        range_min + K for ``top``, range_min + 10 K for ``random``/``softmax``."""
        if self.range_max is not None:
            return self.range_min, self.range_max
        width = self.num_negatives * (1 if self.sampling == "top" else 10)
        return self.range_min, self.range_min + width


def validate_config(cfg: MineConfig, n_items: int) -> None:
    """Raise a one-line :class:`UsageError`: contradicting options, or values that don't
    fit the store's ``n_items`` rows (a ``-k`` at or above them, a ``--range-min`` past
    every candidate)."""
    k = cfg.num_negatives
    if k < 1:
        raise UsageError(f"--num-negatives must be >= 1, got {k}")
    if cfg.range_min < 0:
        raise UsageError(f"--range-min must be >= 0, got {cfg.range_min}")
    if cfg.range_max is not None and cfg.range_min >= cfg.range_max:
        raise UsageError(
            f"--range-min must be < --range-max, got {cfg.range_min} >= {cfg.range_max}")
    lo, hi = cfg.window()
    if k > hi - lo:
        raise UsageError(f"--num-negatives must be <= range-max - range-min, got {k}")
    if cfg.sampling not in SAMPLINGS:
        raise UsageError(f"--sampling must be one of {', '.join(SAMPLINGS)}, got {cfg.sampling}")
    if not cfg.sampling_temperature > 0:
        raise UsageError(
            f"--sampling-temperature must be > 0, got {cfg.sampling_temperature}")
    if cfg.positive not in POSITIVE_CHOICES:
        raise UsageError(
            f"--positive must be one of {', '.join(POSITIVE_CHOICES)}, got {cfg.positive}")
    if cfg.fn_mode not in FN_MODES:
        raise UsageError(f"--fn-mode must be one of {', '.join(FN_MODES)}, got {cfg.fn_mode}")
    if (cfg.min_score is not None and cfg.max_score is not None
            and cfg.min_score > cfg.max_score):
        raise UsageError(
            f"--min-score must be <= --max-score, got {cfg.min_score} > {cfg.max_score}")
    for name, value in (("--absolute-margin", cfg.absolute_margin),
                        ("--relative-margin", cfg.relative_margin)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must be >= 0, got {value}")
    if cfg.max_positives < 1:
        raise UsageError(f"--max-positives must be >= 1, got {cfg.max_positives}")
    if cfg.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if k >= n_items:  # a bad value for this store: bad usage, as a bad value is anywhere
        raise UsageError(
            f"--num-negatives must be < the store's row count ({n_items}), got {k}")
    if cfg.hard and cfg.range_min >= n_items - 1:  # an anchor has at most N - 1 candidates
        raise UsageError(f"--range-min must be <= {max(n_items - 2, 0)}, the last rank a "
                         f"candidate can have (the store has {n_items} rows), got "
                         f"{cfg.range_min}")


# options read only by a hard search, or only with the false-negative filter
HARD_ONLY = ("--range-min", "--range-max", "--sampling", "--sampling-temperature", "--index",
             "--nprobe", "--ef-search", "--nlist", "--exact-max-rows", "--dtype")
FN_ONLY = ("--fn-rules", "--fn-mode", "--fn-margin", "--fn-near-dup-threshold",
           "--fn-cluster-k", "--fn-cluster-runs", "--fn-cluster-votes",
           "--fn-cluster-diffusion", "--fn-community-neighbours")
# each rule's own parameters: (the config's field, the option, the rule that reads it)
RULE_OPTIONS = (("margin", "--fn-margin", "margin"),
                ("near_duplicate_threshold", "--fn-near-dup-threshold", "near-duplicate"),
                ("cluster_runs", "--fn-cluster-runs", "cluster"),
                ("cluster_votes", "--fn-cluster-votes", "cluster"),
                ("cluster_diffusion", "--fn-cluster-diffusion", "cluster"),
                ("community_neighbours", "--fn-community-neighbours", "community"))


def check_given(given: dict[str, Any], hard: bool, filter_fn: bool) -> None:
    """UsageError for an option given (its value not None: a flag with a non-None
    default maps that default to None) that this run never reads: the hard search's
    without ``--hard``, the filter's without ``--filter-false-negatives``, the sampling
    temperature without ``--sampling softmax``."""
    from pairkit.core.options import only_with

    only_with("--hard", hard, tuple((k, given.get(k)) for k in HARD_ONLY))
    only_with("--filter-false-negatives", filter_fn, tuple((k, given.get(k)) for k in FN_ONLY))
    if given.get("--sampling-temperature") is not None and given.get("--sampling") != "softmax":
        raise UsageError("--sampling-temperature applies to --sampling softmax")


def fn_config(filter_fn: bool, rules: str | None, cluster_k: str | None,
              **params: Any) -> Any:
    """The FalseNegativeConfig for the ``--fn-*`` options (None without filtering);
    ``params`` left None take the config's defaults. A rule's own parameter given while
    the rules leave that rule out is refused (it would do nothing)."""
    if not filter_fn:
        return None
    from pairkit.mine.false_negatives import DEFAULT_RULES, FalseNegativeConfig, parse_rules

    fields: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
    if rules is not None:
        fields["rules"] = parse_rules(rules)
    chosen = fields.get("rules", DEFAULT_RULES)
    for name, flag, rule in (*RULE_OPTIONS, ("cluster_ks", "--fn-cluster-k", "cluster")):
        given = cluster_k is not None if name == "cluster_ks" else name in fields
        if given and rule not in chosen:
            raise UsageError(f"{flag} applies to the {rule} rule, which --fn-rules leaves out "
                             f"({','.join(chosen)})")
    if cluster_k is not None and cluster_k.strip().lower() != "auto":
        fields["cluster_ks"] = tuple(parse_int_list(cluster_k, "--fn-cluster-k"))
    return FalseNegativeConfig(**fields)


def positive_config(per_anchor: int | None, neighbours: int | None,
                    fn: FalseNegativeConfig | None,
                    whitening: float | None = None) -> PositiveConfig | None:
    """``--positives`` / ``--positive-neighbours`` / ``--positive-whitening`` as a config
    (None: no mined positives). Default: mined positives with the false-negative filter
    and its mutual-neighbour rule (the same rules' verdicts made useful to training), none
    without it (naive mining stays naive); asked for without that rule, refused: nothing
    would keep them out of the negatives. The last two without mined positives are
    refused, not ignored."""
    from pairkit.mine.positives import DEFAULT_NEIGHBOURS, DEFAULT_PER_ANCHOR, PositiveConfig
    from pairkit.mine.whitening import DEFAULT_POWER

    kept_out = fn is not None and "mutual-neighbour" in fn.rules
    per_anchor_given = per_anchor is not None
    if per_anchor is None:
        per_anchor = DEFAULT_PER_ANCHOR if kept_out else 0
    elif per_anchor > 0 and not kept_out:
        # the mined positives are mutual neighbours: that rule keeps them out of the
        # anchor's negatives (hard mining without it handed most of them out as both)
        why = ("no --filter-false-negatives" if fn is None
               else "--fn-rules without mutual-neighbour")
        raise UsageError(f"--positives {per_anchor}: mined positives are mutual neighbours, "
                         "which only the mutual-neighbour rule keeps out of the anchor's "
                         f"negatives ({why}); add --filter-false-negatives with that rule, "
                         "or --positives 0")
    cfg = PositiveConfig(per_anchor=per_anchor,
                         neighbours=DEFAULT_NEIGHBOURS if neighbours is None else neighbours,
                         whitening=DEFAULT_POWER if whitening is None else whitening)
    cfg.check()
    given = [name for name, value in (("--positive-neighbours", neighbours),
                                      ("--positive-whitening", whitening)) if value is not None]
    if per_anchor == 0 and given:
        why = ("--positives 0" if per_anchor_given else "no --filter-false-negatives"
               if fn is None else "--fn-rules without mutual-neighbour")
        raise UsageError(f"{given[0]} applies to mined positives, and this run mines none "
                         f"({why})")
    return cfg if per_anchor > 0 else None
