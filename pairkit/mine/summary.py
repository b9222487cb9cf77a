"""The human summary of ``pairkit mine`` (stderr), from the stats dict of ``mine_store``."""

from __future__ import annotations

from typing import Any

from pairkit.core.shown import shown_text


def summary_lines(stats: dict[str, Any], output: str) -> list[str]:
    """Lines for a person: rows, relation and index, negatives per anchor, score
    quantiles, rank histogram, removed candidates, false-negative flags, retries."""
    per = stats["negatives_per_anchor"]
    where = "stdout" if output == "-" else shown_text(output)
    lines = [
        f"mined {stats['rows']:,} rows ({stats['format']}) for {stats['anchors']:,} anchors "
        f"-> {where}",
        f"relation: {stats['relation']}; index: {stats['index']}"
        + (f"; blocks on {stats['ray']}" if stats.get("ray") else ""),
        f"negatives per anchor: mean {per['mean']:.2f}, min {per['min']}, max {per['max']}; "
        f"{stats['anchors_short']:,} anchors with fewer than K",
    ]
    for key, label in (("pos_score", "positive"), ("neg_score", "negative")):
        q = stats.get(key)
        if q:
            lines.append(f"{label} scores: min {q['q00']:.3f}  q25 {q['q25']:.3f}  median "
                         f"{q['q50']:.3f}  q75 {q['q75']:.3f}  max {q['q100']:.3f}")
    hist = ", ".join(f"{k}: {v}" for k, v in (stats.get("rank_histogram") or {}).items()
                     if v)
    if hist:  # (no line when no anchor got a negative)
        lines.append(f"negative rank histogram: {hist}")
    removed = ", ".join(f"{k} {v:,}" for k, v in stats["removed"].items() if v)
    lines.append(f"candidates removed: {removed or 'none'}")
    if stats.get("false_negative_rules"):
        flagged = ", ".join(f"{k} {v:,}" for k, v in stats["fn_flagged"].items()) or "none"
        if stats.get("cluster_rows_not_searched"):
            from pairkit.mine.skip import SKIP_MARGIN

            near = ("rows near the anchor in the diffusion coordinates"
                    if (stats.get("clusters") or {}).get("cut_off")
                    else "rows sharing a cluster with the anchor")
            flagged += (f" (cluster: {near} were not searched"
                        + (f", but for those within {SKIP_MARGIN:g} of the diffusion threshold"
                           if stats["fn_flagged"].get("cluster") else "") + ")")
        if stats.get("label_rows_not_searched"):
            flagged += " (label: rows of the anchor's label were not searched)"
        lines.append(f"false negatives flagged ({stats['fn_mode']}): {flagged}"
                     + (f"; {stats['attracted']:,} attracted as positives"
                        if stats.get("attracted") else ""))
    clusters = stats.get("clusters") or {}
    if clusters.get("k"):
        how = ("read off the kNN graph's spectrum" if clusters.get("auto") else
               f"given {', '.join(map(str, clusters['given']))}, at most the store's "
               "rows" if clusters.get("given") else "given")
        ks, runs = clusters["k"], clusters.get("runs", "?")
        line = (f"cluster rule: {', '.join(str(k) for k in ks)} "
                f"{'cluster' if list(ks) == [1] else 'clusters'} ({how}), {runs} k-means "
                f"{'run' if runs == 1 else 'runs'}")
        if clusters.get("off"):
            line += f"; off: {clusters['off']}"
        elif clusters.get("cut_off"):
            line += (f", a diffusion cosine >= {round(clusters['diffusion'], 3):g} alone: "
                     f"{clusters['cut_off']}")
            if clusters.get("diffusion_raised"):
                line += f"; {clusters['diffusion_raised']}"
        else:
            if clusters.get("votes"):
                line += f", {clusters['votes']} must agree"
            if clusters.get("diffusion") is not None:
                line += f", or a diffusion cosine >= {round(clusters['diffusion'], 3):g}"
            for key in ("raised", "diffusion_raised"):
                if clusters.get(key):
                    line += f"; {clusters[key]}"
        lines.append(line)
    mutual = stats.get("mutual") or {}
    if mutual.get("off") or mutual.get("neighbours"):
        cut = mutual.get("neighbours")
        parts = [f"--positive-neighbours {cut['asked']} cut to {cut['used']} (the store "
                 f"has {cut['used'] + 1:,} sources)"] if cut else []
        if mutual.get("off"):
            parts.append(f"off: {mutual['off']}")
        lines.append("mutual-neighbour rule: " + "; ".join(parts))
    est = stats.get("fn_estimate") or {}
    if est.get("hidden_positive_recall") is not None:
        rate = est.get("random_pair_flag_rate")  # None: the sample drew no pair of two sources
        lines.append(
            f"false-negative estimate (no labels used): the rules flag "
            f"{est['hidden_positive_recall']:.1%} of hidden positives (other views of "
            f"{est['anchors']:,} anchors) and "
            + (f"{rate:.1%} of random pairs" if rate is not None
               else "no random pair of two sources to sample")
            + (f" (random pairs sharing a label: {est['random_pair_same_label']:.1%})"
               if est.get("random_pair_same_label") is not None else ""))
    if stats.get("negatives_same_label") is not None:
        lines.append(f"negatives sharing their anchor's label: "
                     f"{stats['negatives_same_label']:.1%}"
                     + over_labelled(stats.get("negatives_labelled"), stats.get("negatives"),
                                     " negatives"))
    mp = stats.get("mined_positives")
    if mp:
        reasons = ", ".join(f"{k} {v:,}" for k, v in mp["reasons"].items()) or "none"
        lines.append(f"mined positives: {mp['rows']:,} rows ({reasons}) for "
                     f"{mp['anchors_with_any']:,} anchors, {mp['per_anchor']:.2f} per anchor "
                     "of the run"
                     + (f"; sharing their anchor's label: {mp['same_label']:.1%}"
                        + over_labelled(mp.get("labelled"), mp["rows"], "")
                        if mp.get("same_label") is not None else "")
                     + (f"; {mp['dropped_other_label']:,} of another label dropped (the "
                        "label rule)" if mp.get("dropped_other_label") else ""))
    if stats.get("retries"):
        lines.append(f"{stats['anchors_retried']:,} anchors searched again with a larger k "
                     f"(up to {stats['k_max']:,})")
    return lines


def over_labelled(labelled: int | None, total: int | None, what: str) -> str:
    """`` of the 98 negatives with both labels known`` after a same-label share over
    ``labelled`` of ``total`` pairs; nothing when that is all of them (or not known)."""
    if labelled is None or total is None or labelled >= total:
        return ""
    return f" of the {labelled:,}{what} with both labels known"


def no_negatives_error(stats: dict[str, Any], config: Any) -> str | None:
    """The error of a run in which no anchor got a negative (None when one did, or when
    there is no anchor): its table would hold no negative (triplet: no row), which looks
    like success and trains nothing, so the command writes nothing. ``stats``: a run's
    (or its blocks' summed) :func:`pairkit.mine.stats.run_record`; ``config``: its
    :class:`~pairkit.mine.config.MineConfig`, whose narrowing options the line names."""
    if stats["negatives"] or not stats["anchors"]:
        return None
    given = [f"--range-min {config.range_min}" if config.hard and config.range_min else ""]
    given += [f"{name} {value:g}" for name, value in (
        ("--min-score", config.min_score), ("--max-score", config.max_score),
        ("--absolute-margin", config.absolute_margin),
        ("--relative-margin", config.relative_margin)) if value is not None]
    given = [g for g in given if g]
    return (f"no negative for any of the {stats['anchors']:,} anchors"
            + (f" with {', '.join(given)}" if given else "")
            + " (an anchor's own source and its positives are never its candidates): "
            "nothing written")


def unknown_pairs_warning(stats: dict[str, Any]) -> str | None:
    """The warning for a pairs file naming paths the store lacks (None when all are known)."""
    from pairkit.core.relations import empty_cells

    if not stats.get("pairs_rows_unknown"):
        return None
    empty = stats.get("pairs_rows_empty", 0)
    named = stats["pairs_rows_unknown"] - empty
    said = [f"{named:,} of {stats['pairs_rows']:,} rows name paths not in the store (e.g. "
            f"{', '.join(map(repr, stats['pairs_unknown_examples']))})"] if named else []
    said += [empty_cells(empty, None if named else stats["pairs_rows"])] if empty else []
    return f"pairs file: {', '.join(said)}; mined the rest"
