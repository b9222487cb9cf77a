"""The training loop: reproducibility, resume, guards, outputs, and the head API."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

from pairkit.core.store_writer import write_store
from pairkit.errors import PairkitError
from pairkit.eval.geometry import all_pairs_uniformity as uniformity
from pairkit.eval.geometry import pair_alignment as alignment
from pairkit.train import epoch
from pairkit.train.config import TrainConfig
from pairkit.train.epoch import lr_at
from pairkit.train.epoch_end import dim_std
from pairkit.train.head import load_head
from pairkit.train.head_folder import read_log
from pairkit.train.loop import train_head
from pairkit.train.losses import LossConfig
from tests.conftest import random_store
from tests.train.helpers import instance_triplets

FAST = {"epochs": 2, "batch_size": 16, "head": "mlp", "out_dim": 8, "device": "cpu"}


@pytest.fixture
def store(tmp_path):
    return random_store(tmp_path / "store", n_sources=24, views=2, dim=12, classes=4)


def weights(path):
    return load_file(str(path / "head.safetensors"))


def same_weights(a, b):
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_two_runs_give_bitwise_identical_weights(store, tmp_path):
    cfg = TrainConfig(relation="instance", val_fraction=0.25, **FAST)
    train_head(store, tmp_path / "h1", cfg)
    train_head(store, tmp_path / "h2", cfg)
    assert same_weights(tmp_path / "h1", tmp_path / "h2")
    train_head(store, tmp_path / "h3", TrainConfig(relation="instance", val_fraction=0.25,
                                                   seed=1, **FAST))
    assert not same_weights(tmp_path / "h1", tmp_path / "h3")


class StopAfter:
    """A hook that interrupts the run after ``n`` epochs (after their checkpoint)."""

    def __init__(self, n):
        self.n = n

    def start(self, total, description):
        pass

    def advance(self, pairs, loss, epoch):
        pass

    def note(self, message):
        pass

    def epoch_done(self, record):
        if record["epoch"] == self.n:
            raise KeyboardInterrupt


@pytest.mark.parametrize("use_table", [False, True])
def test_interrupted_run_resumes_to_the_same_weights(store, tmp_path, use_table):
    table = instance_triplets(store, k=2) if use_table else None
    cfg = TrainConfig(relation=None if use_table else "instance", loss=LossConfig("hard"),
                      **{**FAST, "epochs": 4})
    train_head(store, tmp_path / "straight", cfg, table=table)
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "cut", cfg, table=table, hook=StopAfter(2))
    cut_config = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert cut_config["epochs_done"] == 2 and cut_config["complete"] is False
    assert not load_head(tmp_path / "cut").complete
    result = train_head(store, tmp_path / "cut", cfg, table=table, resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2, 3, 4]
    assert same_weights(tmp_path / "straight", tmp_path / "cut")
    log = [json.loads(x) for x in (tmp_path / "cut" / "train_log.jsonl").read_text().split("\n")
           if x]
    assert [r["epoch"] for r in log] == [1, 2, 3, 4]
    # resumed again: nothing to do, said, the head untouched (a script may rerun it)
    weights = (tmp_path / "cut" / "head.safetensors").read_bytes()
    again = train_head(store, tmp_path / "cut", cfg, table=table, resume=True)
    assert any("already has its 4 epochs: nothing to do" in n for n in again.notes)
    assert [r["epoch"] for r in again.records] == [1, 2, 3, 4]
    assert (tmp_path / "cut" / "head.safetensors").read_bytes() == weights


def test_resume_restores_a_plot_lost_to_a_kill(store, tmp_path):
    """Issue 20.8: a kill while train_plot.png was written left a complete head whose plot
    only a new training could bring back (--resume: "already has N epochs")."""
    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "h", cfg)
    plot = tmp_path / "h" / "train_plot.png"
    weights = (tmp_path / "h" / "head.safetensors").read_bytes()
    plot.unlink()
    result = train_head(store, tmp_path / "h", cfg, resume=True)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert any("train_plot.png was missing" in n for n in result.notes)
    assert (tmp_path / "h" / "head.safetensors").read_bytes() == weights
    again = train_head(store, tmp_path / "h", cfg, resume=True)
    assert any("nothing to do" in n for n in again.notes)


def test_resume_refuses_other_options_and_missing_checkpoint(store, tmp_path):
    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "h", cfg)
    with pytest.raises(PairkitError, match="trained with other options") as refused:
        train_head(store, tmp_path / "h", TrainConfig(relation="instance", lr=0.1,
                                                      **{**FAST, "epochs": 3}), resume=True)
    assert f"(lr {cfg.lr} then, 0.1 now)" in str(refused.value)  # what differs, by name
    with pytest.raises(PairkitError, match="holds no checkpoint"):
        train_head(store, tmp_path / "new", cfg, resume=True)


def test_resume_refusal_names_what_differs():
    """A default that changed since the run (positive_sampling), a nested option, the store
    and the pairs: each named, the ids of the store and the pairs not printed."""
    from pairkit.train.resume import differences

    then = {"positive_sampling": "uniform", "lr": 0.001, "loss": {"keep_input": 0.5},
            "store": "abc123", "pairs": {"sha": "p1"}}
    now = {"positive_sampling": "confidence", "lr": 0.001, "loss": {"keep_input": 0.0},
           "store": "def456", "pairs": {"sha": "p2"}}
    assert differences(then, now) == ['loss.keep_input 0.5 then, 0.0 now', "the pairs",
                                      'positive_sampling "uniform" then, "confidence" now',
                                      "the store"]
    assert differences(then, then) == []


def test_existing_head_needs_force(store, tmp_path):
    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "h", cfg)
    with pytest.raises(PairkitError, match="exists; pass --force"):
        train_head(store, tmp_path / "h", cfg)
    train_head(store, tmp_path / "h", cfg, force=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(PairkitError, match="not a pairkit head"):
        train_head(store, tmp_path / "other", cfg, force=True)


def test_outputs_config_log_plot(store, tmp_path):
    cfg = TrainConfig(relation="label", loss=LossConfig("supcon"), val_fraction=0.25, **FAST)
    result = train_head(store, tmp_path / "h", cfg)
    names = {p.name for p in (tmp_path / "h").iterdir()}
    assert {"head.safetensors", "config.json", "train_log.jsonl", "train_plot.png"} <= names
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["store"]["content_id"] == store.content_id
    assert config["store"]["manifest_hash"] == store.manifest_hash
    assert config["head"] == {"kind": "mlp", "in_dim": 12, "out_dim": 8, "hidden": 12}
    assert config["loss"]["name"] == "supcon" and config["complete"] is True
    for r in result.records:
        assert r["metrics_on"] == "val"
        for key in ("loss", "eval_loss", "gap", "alignment", "uniformity", "pairs_per_s"):
            assert math.isfinite(r[key])
        assert r["gap"] == pytest.approx(r["pos_score"] - r["neg_score"])
    assert (tmp_path / "h" / "train_plot.png").read_bytes()[:4] == b"\x89PNG"


def test_every_loss_trains_from_a_flagged_table(store, tmp_path):
    table = instance_triplets(store, k=3, keep_flagged=True)
    for name in ("infonce", "triplet", "supcon", "debiased", "hard"):
        for mode in ("eliminate", "attract"):
            cfg = TrainConfig(loss=LossConfig(name, symmetric=name == "infonce"), fn_mode=mode,
                              **{**FAST, "head": "linear", "epochs": 1})
            result = train_head(store, tmp_path / f"{name}-{mode}", cfg, table=table)
            assert math.isfinite(result.records[0]["loss"])


def test_head_learns_pulls_positives_together(store, tmp_path):
    cfg = TrainConfig(relation="instance", **{**FAST, "epochs": 6, "out_dim": 16}, lr=3e-3)
    result = train_head(store, tmp_path / "h", cfg)
    assert result.records[-1]["loss"] < result.records[0]["loss"]
    assert result.records[-1]["gap"] > 0.1


def test_nan_loss_stops_with_causes_and_writes_nothing(store, tmp_path):
    cfg = TrainConfig(relation="instance", lr=1e30, warmup=0.0, **FAST)
    with pytest.raises(PairkitError, match=r"loss is nan .*--temperature.*--lr too high"):
        train_head(store, tmp_path / "h", cfg)
    assert not (tmp_path / "h").exists()


def test_force_keeps_the_old_head_until_the_new_run_has_an_epoch(store, tmp_path):
    """--force over a head whose new run fails in its first epoch (a NaN here; Ctrl-C or
    out of memory alike) leaves the old head as it was: it was cleared before training."""
    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "h", cfg)
    before = {p.name: p.read_bytes() for p in (tmp_path / "h").iterdir()}
    bad = TrainConfig(relation="instance", lr=1e30, warmup=0.0, **FAST)
    with pytest.raises(PairkitError, match="loss is nan"):
        train_head(store, tmp_path / "h", bad, force=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "h").iterdir()} == before
    load_head(tmp_path / "h")
    # a run that gets through its epochs replaces every file of the old one
    other = TrainConfig(relation="instance", **{**FAST, "epochs": 1})
    train_head(store, tmp_path / "h", other, force=True)
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["epochs_done"] == 1 and config["complete"]
    assert len(read_log(tmp_path / "h")) == 1


def test_collapse_is_detected_and_stops(tmp_path):
    # every vector the same: any head's outputs are one point
    items = pd.DataFrame({"path": [f"s{i // 2}_{i}" for i in range(16)],
                          "source": [f"s{i // 2}" for i in range(16)]})
    st = write_store(tmp_path / "flat", np.ones((16, 6), np.float32), items, dtype="float32")
    notes = []

    class Hook(StopAfter):
        def note(self, message):
            notes.append(message)

    cfg = TrainConfig(relation="instance", stop_on_collapse=True, **{**FAST, "epochs": 3})
    result = train_head(st, tmp_path / "h", cfg, hook=Hook(99))
    assert result.stopped == "collapse" and len(result.records) == 1
    assert result.records[0]["collapsed"] and "collapsed" in notes[0]
    cfg = TrainConfig(relation="instance", **{**FAST, "epochs": 2})
    result = train_head(st, tmp_path / "h2", cfg)
    assert result.stopped is None and len(result.records) == 2


def test_streaming_from_host_gives_the_same_weights(store, tmp_path, monkeypatch):
    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "a", cfg)
    monkeypatch.setattr(epoch, "place_vectors",
                        lambda nbytes, device: (True, "kept in host memory"))
    result = train_head(store, tmp_path / "b", cfg)
    assert result.streaming and "kept in host memory" in result.notes
    assert same_weights(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_cpu_is_the_cuda_path_and_log_is_strict_json(store, tmp_path,
                                                                         precision):
    """CPU autocast (and fp16's gradient scaler) runs the code CUDA's default
    --precision auto runs; the head trains to about the fp32 result."""
    ref = train_head(store, tmp_path / "fp32", TrainConfig(relation="instance", **FAST))
    cfg = TrainConfig(relation="instance", **{**FAST, "precision": precision})
    result = train_head(store, tmp_path / "h", cfg)
    assert result.precision == precision
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["training"]["precision"] == precision
    for line in (tmp_path / "h" / "train_log.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    want, got = ref.records[-1], result.records[-1]
    assert math.isfinite(got["loss"])
    assert abs(got["loss"] - want["loss"]) < 0.05 * abs(want["loss"]) + 0.05


def test_bad_inputs(store, tmp_path):
    with pytest.raises(PairkitError, match="give a pair table"):
        train_head(store, tmp_path / "h", TrainConfig(**FAST))
    with pytest.raises(PairkitError, match="--batch-size must be >= 2"):
        train_head(store, tmp_path / "h", TrainConfig(relation="instance",
                                                      **{**FAST, "batch_size": 1}))
    one_view = random_store(tmp_path / "one", n_sources=6, views=1, dim=4)
    with pytest.raises(PairkitError, match="instance needs 2\\+ views per source"):
        train_head(one_view, tmp_path / "h", TrainConfig(relation="instance", **FAST))
    with pytest.raises(PairkitError, match="--device"):
        train_head(store, tmp_path / "h", TrainConfig(relation="instance",
                                                      **{**FAST, "device": "tpu"}))


def test_head_api_and_errors(store, tmp_path):
    train_head(store, tmp_path / "h",  # the module alone (no pair whitening)
               TrainConfig(relation="instance", pair_whitening=0, **{**FAST, "head": "linear"}))
    head = load_head(tmp_path / "h")
    assert (head.in_dim, head.out_dim) == (12, 8)
    vectors = store.vectors()
    z = head.apply(vectors, batch_size=7)
    assert z.shape == (48, 8) and z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)
    w = weights(tmp_path / "h")["0.weight"]           # linear head: z = normalize(x W^T)
    ref = vectors @ w.T
    np.testing.assert_allclose(z, ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-5)
    np.testing.assert_array_equal(z, head.apply(vectors, batch_size=65536))
    with pytest.raises(PairkitError, match="takes vectors of dim 12"):
        head.apply(np.ones((3, 5), np.float32))
    with pytest.raises(PairkitError, match="not found"):
        load_head(tmp_path / "missing")
    (tmp_path / "h" / "config.json").write_text("{not json")
    with pytest.raises(PairkitError, match="config.json is unreadable"):
        load_head(tmp_path / "h")


def test_metrics_against_loops():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(7, 3))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    pairs = [(i, j) for i in range(7) for j in range(i + 1, 7)]
    want = math.log(sum(math.exp(-2 * float(np.sum((z[i] - z[j]) ** 2))) for i, j in pairs)
                    / len(pairs))
    assert uniformity(z) == pytest.approx(want, rel=1e-9)
    assert uniformity(np.tile(z[:1], (5, 1))) == pytest.approx(0.0, abs=1e-9)
    assert alignment(z[:3], z[3:6]) == pytest.approx(
        sum(float(np.sum((z[i] - z[i + 3]) ** 2)) for i in range(3)) / 3)
    assert dim_std(np.tile(z[:1], (5, 1))) == pytest.approx(0.0, abs=1e-7)


def test_epoch_uniformity_is_over_every_pair_of_the_eval_items():
    """The epoch metrics' uniformity over the EVAL_ITEMS (2,048) rows is the exact mean over
    all their distinct pairs (scipy's pdist as the reference), not a sample of pairs."""
    from scipy.spatial.distance import pdist

    from pairkit.train.epoch_end import EVAL_ITEMS

    rng = np.random.default_rng(1)
    z = rng.normal(size=(EVAL_ITEMS, 24))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    a = -2.0 * pdist(z, "sqeuclidean")
    want = float(a.max() + np.log(np.mean(np.exp(a - a.max()))))
    assert uniformity(z) == pytest.approx(want, rel=1e-9)
    assert lr_at(0, 100, 10, 1.0) == pytest.approx(0.1)
    assert lr_at(9, 100, 10, 1.0) == pytest.approx(1.0)
    assert lr_at(10, 100, 10, 1.0) == pytest.approx(1.0)
    assert lr_at(55, 100, 10, 1.0) == pytest.approx(0.5)
    assert lr_at(100, 100, 10, 1.0) == pytest.approx(0.0, abs=1e-12)


def test_messages_say_which_loss_and_which_precision():
    """Issue 20.13: the epoch line read `loss 5.1979, train loss 4.6756` (which is which?)
    and the NaN-loss message told an fp32 run to try fp32."""
    from pairkit.train.epoch import overflow_hint
    from pairkit.train.plot import eval_loss_name

    assert eval_loss_name("val") == "validation loss"
    assert eval_loss_name("train") == "train-pair loss after the epoch"
    assert overflow_hint("fp32") == ""
    assert overflow_hint("fp16") == " or fp16 overflow (--precision fp16; try fp32 or bf16)"
    assert overflow_hint("bf16") == " or bf16 overflow (--precision bf16; try fp32)"


def test_keep_input_keeps_the_inputs_neighbour_order(tmp_path):
    """With a large --keep-input weight the residual head's outputs rank each row's
    neighbours as the inputs do more closely than without it (in-batch training on
    instance pairs alone reorders them), and the term is part of the run's fingerprint."""
    store = random_store(tmp_path / "store", n_sources=64, views=2, dim=16, classes=4, seed=3)
    x = store.vectors(np.float32)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    base = {"relation": "instance", "epochs": 8, "batch_size": 32, "device": "cpu",
            "lr": 1e-2, "seed": 0}

    def rank_agreement(head_dir) -> float:
        z = load_head(head_dir).apply(store.vectors(np.float32))
        z = z / np.linalg.norm(z, axis=1, keepdims=True)
        si, so = x @ x.T, z @ z.T
        np.fill_diagonal(si, -np.inf)
        np.fill_diagonal(so, -np.inf)
        top_in = np.argsort(-si, axis=1)[:, :10]
        top_out = np.argsort(-so, axis=1)[:, :10]
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top_in, top_out,
                                                                          strict=True)]))

    train_head(store, tmp_path / "plain", TrainConfig(loss=LossConfig(keep_input=0.0), **base))
    train_head(store, tmp_path / "kept",
               TrainConfig(loss=LossConfig(keep_input=20.0), **base))
    plain, kept = rank_agreement(tmp_path / "plain"), rank_agreement(tmp_path / "kept")
    assert kept > plain + 0.2, (plain, kept)  # measured 0.49 against 0.91
    with pytest.raises(PairkitError, match=r"\(loss.keep_input 20.0 then, 0.0 now\)"):
        train_head(store, tmp_path / "kept",
                   TrainConfig(loss=LossConfig(keep_input=0.0), **{**base, "epochs": 9}),
                   resume=True)


def test_a_negative_equal_to_the_examples_positive_or_anchor_takes_no_part():
    """A table's negative that is the example's own positive (a mined positive swapped in,
    or a hand-made table) or its anchor was in the denominator as a negative: masked now,
    as padding is."""
    import torch

    from pairkit.train.data import PairArrays
    from pairkit.train.epoch import device_data, forward, make_autocast

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(6, 4)).astype(np.float32)
    data, _ = device_data(vectors, np.arange(6), torch.device("cpu"))
    pairs = PairArrays(np.array([0, 1]), np.array([2, 3]),
                       np.array([[2, 4, -1], [1, 5, 3]]), np.zeros((2, 3), bool))
    module = torch.nn.Identity()
    out = forward(module, data, pairs, np.arange(2), make_autocast(torch.device("cpu"), None))
    valid = out[3]
    assert valid.tolist() == [[False, True, False], [False, True, False]]


@pytest.mark.parametrize("pair_whitening", [0, None])
def test_weights_that_blow_up_stop_the_run(store, tmp_path, pair_whitening):
    """Found by a bug hunt (2026-12-06): with --lr 1e30 the epoch's training loss stayed
    finite while the last step made the weights NaN: exit 0 with a head of NaN rows (or,
    with the pair whitening, an internal LinAlgError). Now the run stops as on a NaN loss,
    the epoch not saved."""
    one_step = random_store(tmp_path / "s", n_sources=60, views=2, dim=8, classes=4)
    cfg = TrainConfig(relation="instance", lr=1e30, warmup=0.0, pair_whitening=pair_whitening,
                      epochs=1, device="cpu")  # one batch: one step, its loss finite
    with pytest.raises(PairkitError, match=r"outputs are not finite after epoch 1: likely "
                                           r"causes: .*--lr too high.*epoch 1 was not saved"):
        train_head(one_step, tmp_path / "h", cfg)
    assert not (tmp_path / "h" / "head.safetensors").exists()


def test_collapse_note_names_only_the_bound_crossed():
    """It said "dim std 0.033 < 0.02 or uniformity -0.016 > -0.1" when only uniformity
    was past its bound."""
    from pairkit.train.epoch_end import collapse_note

    note = collapse_note({"epoch": 1, "dim_std": 0.033, "uniformity": -0.016}, False)
    assert "uniformity -0.016 > -0.1" in note and "dim std" not in note
    note = collapse_note({"epoch": 2, "dim_std": 0.01, "uniformity": -0.5}, True)
    assert "dim std 0.010 < 0.02" in note and "uniformity" not in note
    note = collapse_note({"epoch": 3, "dim_std": 0.01, "uniformity": -0.05}, True)
    assert "dim std 0.010 < 0.02 and uniformity -0.050 > -0.1" in note


def test_resume_takes_the_same_table_by_another_path(store, tmp_path):
    """Found by a bug hunt (2026-12-06): the fingerprint held the table's path as given,
    so the same table from another folder (or a copy) was refused as "the pairs"; the
    table is known by its content. A seed torch can't take is a usage error."""
    table = instance_triplets(store, k=2)
    cfg = TrainConfig(relation=None, **FAST)
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "h", cfg, table=table, table_name="pairs.parquet",
                   hook=StopAfter(1))
    result = train_head(store, tmp_path / "h", cfg, table=table,
                        table_name=str(tmp_path / "copy.parquet"), resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2]
    with pytest.raises(PairkitError, match="the pairs"):  # another table is still refused
        train_head(store, tmp_path / "h", TrainConfig(relation=None, **{**FAST, "epochs": 3}),
                   table=table.iloc[:-3], table_name="pairs.parquet", resume=True)
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match=r"--seed must be in \[0, 2\*\*63\)"):
        TrainConfig(seed=2**64, **FAST).check()


def test_positive_share_zero_ignores_the_mined_positives(store, tmp_path):
    """Found by a bug hunt (2026-12-06): with --positive-share 0 the mined-only examples
    still trained and the pair whitening still fitted the mined pairs."""
    import pairkit

    table = pairkit.mine_pairs(store, num_negatives=2, filter_false_negatives=True,
                               fn_rules="near-duplicate,mutual-neighbour,cluster")
    mined = table["positive_kind"] == "mined"
    assert mined.any()
    cfg = TrainConfig(relation=None, positive_share=0.0, **FAST)
    train_head(store, tmp_path / "zero", cfg, table=table)
    train_head(store, tmp_path / "none", cfg, table=table[~mined].reset_index(drop=True))
    for name in ("head.safetensors", "whitening.safetensors"):
        assert (tmp_path / "zero" / name).read_bytes() == (tmp_path / "none" / name).read_bytes()
    with pytest.raises(PairkitError, match="ignores the mined positives, and the table holds "
                                           "no other rows"):
        train_head(store, tmp_path / "only", cfg, table=table[mined].reset_index(drop=True))


def test_resume_takes_options_spelled_out_at_their_defaults(store, tmp_path):
    """Found by a bug hunt (2026-12-06): the fingerprint held the options as typed, so a
    run resumed with --head residual, --hidden 512, --out-dim <in_dim> or --relation
    instance (with a table) was refused as "trained with other options" (and a run
    started with them could not be resumed without them); it holds what they resolve to.
    A checkpoint written with the options as typed still resumes."""
    import torch

    table = instance_triplets(store, k=2)
    base = {"epochs": 3, "batch_size": 16, "device": "cpu"}
    spelled = TrainConfig(head="residual", hidden=512, out_dim=store.dim, relation="instance",
                          **base)
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "h", TrainConfig(**base), table=table, hook=StopAfter(1))
    result = train_head(store, tmp_path / "h", spelled, table=table, resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2, 3]
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "s", spelled, table=table, hook=StopAfter(1))
    result = train_head(store, tmp_path / "s", TrainConfig(**base), table=table, resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2, 3]
    # a checkpoint of before the fix: the options as typed (None) in its fingerprint
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "o", TrainConfig(**base), table=table, hook=StopAfter(1))
    ckpt = torch.load(tmp_path / "o" / "checkpoint.pt", weights_only=True)
    old = json.loads(ckpt["fingerprint"])
    old.update(head=None, out_dim=None, hidden=None, relation=None)
    ckpt["fingerprint"] = json.dumps(old, sort_keys=True)
    torch.save(ckpt, tmp_path / "o" / "checkpoint.pt")
    result = train_head(store, tmp_path / "o", spelled, table=table, resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2, 3]
    with pytest.raises(PairkitError, match="hidden 512 then, 64 now"):  # still compared
        train_head(store, tmp_path / "o", TrainConfig(hidden=64, **{**base, "epochs": 4}),
                   table=table, resume=True)


def test_resume_with_the_epochs_done_finishes_an_interrupted_run(store, tmp_path):
    """Found by a bug hunt (2026-12-06): --resume --epochs 2 on a run stopped after 2 of
    4 epochs said "nothing to do", and the head stayed unfinished for good (complete
    false, no whitening); it is finished at 2 epochs (whitening fitted, complete), said.
    Fewer epochs than were done is refused: the weights can't go back."""
    from pairkit.errors import UsageError

    cfg = TrainConfig(relation="instance", **{**FAST, "epochs": 4})
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "h", cfg, hook=StopAfter(2))
    weights_before = (tmp_path / "h" / "head.safetensors").read_bytes()
    with pytest.raises(UsageError, match="--epochs 1 is fewer than the 2 epochs"):
        train_head(store, tmp_path / "h", TrainConfig(relation="instance",
                                                      **{**FAST, "epochs": 1}), resume=True)
    two = TrainConfig(relation="instance", **{**FAST, "epochs": 2})
    result = train_head(store, tmp_path / "h", two, resume=True)
    assert any("finished at 2 epochs" in n for n in result.notes)
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["complete"] is True and config["epochs_done"] == 2
    assert config["whitening"] is not None and load_head(tmp_path / "h").whitening is not None
    assert (tmp_path / "h" / "head.safetensors").read_bytes() == weights_before
    assert result.trained and result.head_kind == "mlp" and result.whitened
    again = train_head(store, tmp_path / "h", two, resume=True)
    assert any("nothing to do" in n for n in again.notes)


def test_nothing_to_do_resume_describes_the_head_it_left(store, tmp_path):
    """Found by a bug hunt (2026-12-06): the result of a "nothing to do" --resume had no
    head kind and dim 0 (the summary said "trained  head 16->0"), and a --whiten that
    differed from the run's was dropped without a word."""
    from pairkit.train.command import summary_line

    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "h", cfg)
    result = train_head(store, tmp_path / "h", cfg, resume=True)
    assert not result.trained
    assert (result.head_kind, result.module_dim, result.out_dim, result.whitened) == \
        ("mlp", 8, 8, True)
    line = summary_line(result, store.dim, "infonce", tmp_path / "h")
    assert line.startswith("nothing trained: mlp head 12->8 (outputs whitened to 8 dims), "
                           "trained with infonce for 2 epochs")
    other = TrainConfig(relation="instance", whiten=0.25, **FAST)
    result = train_head(store, tmp_path / "h", other, resume=True)
    assert any("keeps its whitening" in n for n in result.notes)


def test_val_fraction_holding_out_one_source_is_refused(store, tmp_path):
    """Found by a bug hunt (2026-12-06): --val-fraction 0.001 held out one source (two
    near-identical views): no negatives (gap nan, loss 0) and a uniformity of about 0,
    read as collapse (--stop-on-collapse stopped healthy training). A split whose
    validation side has fewer than 2 positive groups is refused; 2 sources train."""
    cfg = TrainConfig(relation="instance", val_fraction=0.01, stop_on_collapse=True, **FAST)
    with pytest.raises(PairkitError, match=r"--val-fraction 0.01 holds out 1 source "
                                           r"\(1 instance group\)"):
        train_head(store, tmp_path / "h", cfg)
    assert not (tmp_path / "h").exists()
    table = instance_triplets(store, k=2)
    with pytest.raises(PairkitError, match="--val-fraction 0.01 holds out 1 source"):
        train_head(store, tmp_path / "t", TrainConfig(val_fraction=0.01, **FAST), table=table)
    two = TrainConfig(relation="instance", val_fraction=0.08, stop_on_collapse=True, **FAST)
    result = train_head(store, tmp_path / "two", two)  # 2 of 24 sources
    assert result.stopped is None and not result.records[-1]["collapsed"]
    assert math.isfinite(result.records[-1]["gap"])
    assert any("holds out 2 positive groups, under the 8" in n for n in result.notes)


def test_a_validation_side_whose_pairs_have_no_negative_is_refused(tmp_path):
    """Found by a bug hunt (hunt7 1): under --relation label the validation check counted
    the groups of every held-out item, and an item without a positive there (a one-view
    source alone with its label, an unlabelled item: a group of its own) counted, so a
    split whose pairs were all of one label passed: every epoch said "validation loss
    0.0000, gap n/a (no negatives)" and the run exited 0. Refused as a split of one
    group is; a split holding pairs of two labels trains. (--val-fraction 0.3 holds out
    s5, s6 and s9 of these ten sources.)"""
    cfg = {**FAST, "out_dim": 4, "head": "residual", "val_fraction": 0.3}
    sources = [f"s{i}" for i in range(10)]
    one_view = tiny_store(tmp_path, "one", sources, list("abcabaabab"))
    with pytest.raises(PairkitError, match=r"--val-fraction 0.3 holds out 3 sources whose "
                                           r"validation pairs have no negative \(1 label "
                                           r"group with pairs\)"):
        train_head(one_view, tmp_path / "h1", TrainConfig(relation="label", **cfg))
    two_views = [s for s in sources for _ in range(2)]
    labels = [x for x in "abcababcab" for _ in range(2)]
    labels[12:14] = labels[18:20] = [None, None]  # s6 and s9: s5's views the only pairs
    part = tiny_store(tmp_path, "part", two_views, labels)
    with pytest.raises(PairkitError, match="validation pairs have no negative"):
        train_head(part, tmp_path / "h2", TrainConfig(relation="label", **cfg))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("h")]
    labels[12:14] = ["b", "b"]
    whole = tiny_store(tmp_path, "whole", two_views, labels)
    result = train_head(whole, tmp_path / "h3", TrainConfig(relation="label", **cfg))
    assert math.isfinite(result.records[-1]["gap"])


def test_relation_label_says_how_many_unlabelled_items_it_leaves_out(tmp_path):
    """Found by a bug hunt (2026-12-06): --relation label on a partly labelled store
    trained on the labelled items only and said nothing of the rest (a third of the
    store); it says how many items had no label and were left out."""
    full = random_store(tmp_path / "full", n_sources=24, views=2, dim=12, classes=4)
    items = full.items.copy()
    items.loc[::3, "label"] = None
    store = write_store(tmp_path / "part", full.vectors(), items, encoder={"name": "random"})
    result = train_head(store, tmp_path / "h", TrainConfig(relation="label", **FAST))
    assert any("--relation label: 16 of 48 items have no label and are left out" in n
               for n in result.notes), result.notes
    assert result.examples == 32
    whole = train_head(full, tmp_path / "w", TrainConfig(relation="label", **FAST))
    assert not any("no label" in n for n in whole.notes)


@pytest.mark.parametrize("failure", ["disk full", KeyboardInterrupt])
def test_force_keeps_the_old_head_when_the_first_save_fails(store, tmp_path, monkeypatch,
                                                            failure):
    """Found by a bug hunt (hunt-n 1): train --force removed the old head's files just
    before the first epoch's save, so a full disk while writing checkpoint.pt left neither
    head, and the message said "nothing was lost". The first save now goes to a temp
    folder in the head's folder, and the old files are replaced only once it is whole."""
    import errno

    from pairkit.train import epoch_end

    cfg = TrainConfig(relation="instance", **FAST)
    train_head(store, tmp_path / "h", cfg)
    before = {p.name: p.read_bytes() for p in (tmp_path / "h").iterdir()}
    real = epoch_end.save_checkpoint

    def failing(out, *args, **kwargs):
        if failure is KeyboardInterrupt:
            raise KeyboardInterrupt
        from pairkit.core.atomic import atomic_path

        with atomic_path(out / "checkpoint.pt"):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(epoch_end, "save_checkpoint", failing)
    other = TrainConfig(relation="instance", **{**FAST, "epochs": 1})
    with pytest.raises(KeyboardInterrupt if failure is KeyboardInterrupt else PairkitError) \
            as caught:
        train_head(store, tmp_path / "h", other, force=True)
    if failure is not KeyboardInterrupt:
        head_file = tmp_path / "h" / "checkpoint.pt"
        assert str(caught.value) == (f"disk full while writing {head_file}: free space and "
                                     "rerun; nothing was lost")
    assert {p.name: p.read_bytes() for p in (tmp_path / "h").iterdir()} == before
    load_head(tmp_path / "h")
    monkeypatch.setattr(epoch_end, "save_checkpoint", real)
    train_head(store, tmp_path / "h", other, force=True)
    assert json.loads((tmp_path / "h" / "config.json").read_text())["epochs_done"] == 1
    assert not [p.name for p in (tmp_path / "h").iterdir() if p.name.startswith(".")]


def tiny_store(tmp_path, name: str, sources: list[str], labels: list[str] | None = None):
    """A store of one row per entry of ``sources`` (views numbered within a source), random
    vectors of dim 4."""
    items = pd.DataFrame({"path": [f"p{i}.png" for i in range(len(sources))],
                          "source": sources})
    items["view"] = items.groupby("source").cumcount()
    if labels is not None:
        items["label"] = labels
    x = np.random.default_rng(len(sources)).normal(size=(len(sources), 4)).astype(np.float32)
    return write_store(tmp_path / name, x, items, encoder={"name": "random"})


NO_NEGATIVE = "training needs 2 or more positive groups: its pairs have no negative"


def test_a_training_side_without_any_negative_is_refused(tmp_path):
    """Found by a bug hunt (hunt-q 1): with one source (instance), one label (label), or a
    --val-fraction leaving one source to train on, the loss was identically 0: train ran
    every epoch, printed "gap nan", wrote the head and exited 0. Refused as the
    validation side is, before the head folder is made."""
    cfg = {**FAST, "out_dim": 4, "head": "residual"}
    one = tiny_store(tmp_path, "one", ["s"] * 4)
    with pytest.raises(PairkitError, match=NO_NEGATIVE + r" \(1 instance group"):
        train_head(one, tmp_path / "h1", TrainConfig(relation="instance", **cfg))
    lab1 = tiny_store(tmp_path, "lab1", [f"i{i}" for i in range(10)], ["a"] * 10)
    with pytest.raises(PairkitError, match=NO_NEGATIVE + r" \(1 label group"):
        train_head(lab1, tmp_path / "h2", TrainConfig(relation="label", **cfg))
    six = tiny_store(tmp_path, "six", [f"s{i // 2}" for i in range(12)])
    with pytest.raises(PairkitError, match=NO_NEGATIVE + r" \(1 instance group.*--val-frac"):
        train_head(six, tmp_path / "h3", TrainConfig(relation="instance", val_fraction=0.9,
                                                     **cfg))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("h")]
    # two sources train
    two = tiny_store(tmp_path, "two", ["a", "a", "b", "b"])
    result = train_head(two, tmp_path / "h4", TrainConfig(relation="instance", **cfg))
    assert math.isfinite(result.records[-1]["gap"])


def table_rows(store, rows: list[tuple[int, int, int]], flagged: bool = False) -> pd.DataFrame:
    """A triplet table of ``(anchor, positive, negative)`` rows of ``store``."""
    paths = store.items["path"].to_numpy()
    df = pd.DataFrame([{"store_id": store.content_id, "anchor_id": a, "positive_id": p,
                        "negative_id": n, "anchor_path": paths[a], "positive_path": paths[p],
                        "negative_path": paths[n], "pos_score": 0.5, "neg_score": 0.1,
                        "neg_rank": 0} for a, p, n in rows])
    if flagged:
        df["false_negative"] = True
        df["fn_reason"] = "cluster"
    return df


@pytest.mark.parametrize("fn_mode", ["eliminate", "attract"])
def test_a_table_whose_pairs_have_no_negative_is_refused(tmp_path, fn_mode):
    """hunt-q 1: a table whose every mined negative is a flagged false negative (eliminated
    or attracted), between the only two sources, which the flags also keep from being
    each other's in-batch negatives: no negative anywhere, refused. The same table
    unflagged trains."""
    cfg = {**FAST, "out_dim": 4, "head": "residual", "fn_mode": fn_mode}
    two = tiny_store(tmp_path, "two", ["a", "a", "b", "b"])
    rows = [(0, 1, 2), (1, 0, 3), (2, 3, 0), (3, 2, 1)]
    with pytest.raises(PairkitError, match=NO_NEGATIVE + r" \(every mined negative"):
        train_head(two, tmp_path / "h", TrainConfig(**cfg),
                   table=table_rows(two, rows, flagged=True))
    result = train_head(two, tmp_path / "ok", TrainConfig(**cfg), table=table_rows(two, rows))
    assert math.isfinite(result.records[-1]["gap"])


def test_mined_negatives_are_negatives_with_one_positive_group(tmp_path):
    """hunt-q 1: one source with views (the only positive group) and two one-view sources
    as its mined negatives: the pairs have negatives, so it trains."""
    store = tiny_store(tmp_path, "s", ["a", "a", "b", "c"])
    table = table_rows(store, [(0, 1, 2), (1, 0, 3)])
    cfg = {**FAST, "out_dim": 4, "head": "residual"}
    result = train_head(store, tmp_path / "h", TrainConfig(**cfg), table=table)
    assert math.isfinite(result.records[-1]["gap"])


def test_a_gap_without_negatives_is_said_not_nan(store, tmp_path):
    """hunt-q 1: a gap with no negative (NaN) read "gap nan" in the epoch lines and the
    summary."""
    from pairkit.train.command import summary_line
    from pairkit.train.plot import gap_text

    assert gap_text(float("nan")) == "n/a (no negatives)"
    assert gap_text(None) == "n/a (no negatives)"  # NaN in the log is null
    assert gap_text(0.1234) == "0.123"
    result = train_head(store, tmp_path / "h", TrainConfig(relation="instance", **FAST))
    result.records[-1]["gap"] = float("nan")
    line = summary_line(result, store.dim, "infonce", tmp_path / "h")
    assert "gap n/a (no negatives) ->" in line and "nan" not in line


def test_a_read_table_is_freed_after_the_set_up(store, tmp_path, monkeypatch):
    """The pair table read from a path is only needed to make the run's pair arrays: no
    frame keeps it while the epochs run (a mined table of millions of rows is ~0.4 GB)."""
    import gc
    import weakref

    from pairkit.core import tables
    from pairkit.train.command import train_to_files

    path = tmp_path / "pairs.parquet"
    instance_triplets(store, k=2).to_parquet(path)
    refs = []
    read = tables.read_table

    def reading(*args, **kwargs):
        df = read(*args, **kwargs)
        refs.append(weakref.ref(df))
        return df

    alive = []

    class Watch(StopAfter):
        def epoch_done(self, record):
            gc.collect()
            alive.append(refs[0]() is not None)

    monkeypatch.setattr(tables, "read_table", reading)
    train_to_files(store.root, tmp_path / "h", TrainConfig(**FAST), pairs=str(path),
                   hook=Watch(0))
    assert alive == [False, False]


def test_the_epoch_geometry_is_measured_on_the_validation_items():
    """With --val-fraction the uniformity and dim std are measured on the validation
    sources' rows (of 8 or more positive groups), else on the training rows, said in a
    note (hunt 3b: measuring on the training rows always survived)."""
    from pairkit.train.epoch_end import EVAL_ITEMS, MIN_GEOMETRY_GROUPS, eval_items

    groups = np.repeat(np.arange(40), 2)
    val = groups < MIN_GEOMETRY_GROUPS  # the first 8 groups held out
    cfg = TrainConfig(val_fraction=0.2)
    notes: list[str] = []
    items, side = eval_items(val, cfg, groups, notes.append)
    assert items.tolist() == np.flatnonzero(val).tolist() and side == "val" and not notes
    few = groups < MIN_GEOMETRY_GROUPS - 1
    items, side = eval_items(few, cfg, groups, notes.append)
    assert items.tolist() == np.flatnonzero(~few).tolist() and side == "val"
    assert len(notes) == 1 and "measured on the training items" in notes[0]
    items, side = eval_items(np.zeros(80, bool), TrainConfig(), groups)
    assert items.tolist() == list(range(80)) and side == "train"
    # a large validation side: a seeded sample of it
    big = np.zeros(3 * EVAL_ITEMS, bool)
    big[::2] = True
    items, _ = eval_items(big, cfg, np.arange(3 * EVAL_ITEMS))
    assert len(items) == EVAL_ITEMS and big[items].all()
    assert np.array_equal(items, np.sort(items))


def test_the_logged_epoch_loss_is_the_mean_over_pairs(store, tmp_path, monkeypatch):
    """An epoch's ``loss`` is each batch's mean loss weighted by its pairs, over the
    epoch's pairs: batches of 20 and a last smaller one (hunt 3b: an unweighted sum over
    the pairs count survived, a loss about 20 times too small)."""
    seen: list[tuple[float, int]] = []
    real = epoch.batch_loss

    def recorded(cfg, za, *rest, **more):
        loss = real(cfg, za, *rest, **more)
        seen.append((float(loss.detach()), len(za)))
        return loss

    monkeypatch.setattr(epoch, "batch_loss", recorded)
    cfg = TrainConfig(relation="instance", **{**FAST, "epochs": 1, "batch_size": 20})
    result = train_head(store, tmp_path / "h", cfg)
    (record,) = result.records
    assert len(seen) > 2 and len({b for _, b in seen}) == 2  # one batch of another size
    want = sum(v * b for v, b in seen) / sum(b for _, b in seen)
    assert sum(b for _, b in seen) == record["pairs"]
    assert record["loss"] == pytest.approx(want, rel=1e-6)


def test_resume_keeps_only_the_log_records_of_the_epochs_in_its_checkpoint(store, tmp_path):
    """A log line of an epoch whose checkpoint was never written (a kill between the
    two) is dropped on resume: that epoch is trained again and logged once (hunt 3b:
    keeping every line of the log survived, epoch 3 logged twice)."""
    cfg = TrainConfig(relation="instance", **{**FAST, "epochs": 2})
    train_head(store, tmp_path / "h", cfg)
    log = read_log(tmp_path / "h")
    stale = {**log[-1], "epoch": 3, "loss": 999.0}
    with open(tmp_path / "h" / "train_log.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(stale) + "\n")
    result = train_head(store, tmp_path / "h", TrainConfig(
        relation="instance", **{**FAST, "epochs": 3}), resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2, 3]
    logged = read_log(tmp_path / "h")
    assert [r["epoch"] for r in logged] == [1, 2, 3] and logged[2]["loss"] != 999.0


def test_a_config_left_complete_behind_its_checkpoint_is_not_finished(store, tmp_path):
    """config.json says complete at 2 epochs, the checkpoint has 3 (a kill between the
    checkpoint and the config of a resumed run): resuming with --epochs 3 finishes the run
    at 3 (its whitening fitted on epoch 3's weights), not "nothing to do" with epoch 2's
    (hunt 3b: trusting config's complete alone survived)."""
    two = TrainConfig(relation="instance", whiten=0.25, **{**FAST, "epochs": 2})
    train_head(store, tmp_path / "h", two)
    config_at_two = (tmp_path / "h" / "config.json").read_bytes()
    four = TrainConfig(relation="instance", whiten=0.25, **{**FAST, "epochs": 4})
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "h", four, resume=True, hook=StopAfter(3))
    (tmp_path / "h" / "config.json").write_bytes(config_at_two)
    three = TrainConfig(relation="instance", whiten=0.25, **{**FAST, "epochs": 3})
    result = train_head(store, tmp_path / "h", three, resume=True)
    assert not any("nothing to do" in n for n in result.notes), result.notes
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["complete"] is True and config["epochs_done"] == 3


def test_a_last_batch_of_one_pair_joins_the_one_before():
    """A batch of one pair has no in-batch negative: a last batch of one joins the one
    before it; a last batch of two stays (hunt 3b: never joining survived)."""
    assert epoch.batches(33, 16) == [(0, 16), (16, 33)]
    assert epoch.batches(34, 16) == [(0, 16), (16, 32), (32, 34)]
    assert epoch.batches(17, 16) == [(0, 17)]
    assert epoch.batches(1, 16) == [(0, 1)] and epoch.batches(0, 16) == []


def test_evaluate_scores_by_hand():
    """The epoch's pos_score and neg_score: the mean cosine of each pair's positive and of
    its in-batch negatives (the other pairs' positives, here), by hand on an identity
    head; gap their difference (hunt 3b: the negatives' mean taken over the positives'
    scores survived: only gap == pos - neg was checked)."""
    import torch

    from pairkit.train.data import PairArrays
    from pairkit.train.epoch import device_data, make_autocast
    from pairkit.train.epoch_end import evaluate

    rng = np.random.default_rng(0)
    v = rng.normal(size=(6, 4)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    data, _ = device_data(v, np.arange(6), torch.device("cpu"))
    pairs = PairArrays(np.array([0, 2, 4]), np.array([1, 3, 5]), np.zeros((3, 0), np.int64),
                       np.zeros((3, 0), bool))
    cfg = TrainConfig(loss=LossConfig("infonce", keep_input=0.0), batch_size=16)
    got = evaluate(torch.nn.Identity(), data, pairs, np.arange(6), cfg,
                   make_autocast(torch.device("cpu"), None))
    s = v.astype(np.float64) @ v.T.astype(np.float64)
    pos = [s[0, 1], s[2, 3], s[4, 5]]
    neg = [s[a, p] for a in (0, 2, 4) for p in (1, 3, 5) if p != a + 1]
    assert got["pos_score"] == pytest.approx(np.mean(pos), abs=1e-6)
    assert got["neg_score"] == pytest.approx(np.mean(neg), abs=1e-6)
    assert got["gap"] == pytest.approx(np.mean(pos) - np.mean(neg), abs=1e-6)


def test_the_trained_epochs_are_saved_when_the_whitening_runs_out_of_memory(store, tmp_path,
                                                                          monkeypatch):
    """Found by reading the code (2026-12-07): the whitening is fitted after the last
    epoch, before that epoch is saved, so running out of memory there lost the epoch (all
    of a one-epoch run). Now the trained epochs are saved (config.json: not complete, no
    whitening), the error says so in one line, and --resume with another
    --pair-whitening (not in the run's fingerprint) finishes the head without training."""
    import pairkit.train.loop as loop

    real = loop.fitted_whitening
    cfg = TrainConfig(relation="instance", **FAST)
    want = train_head(store, tmp_path / "ref", cfg)

    def fails(*args, **kwargs):
        raise MemoryError("Unable to allocate 11.9 GiB for an array with shape "
                          "(40000, 40000) and data type float64")

    monkeypatch.setattr(loop, "fitted_whitening", fails)
    with pytest.raises(PairkitError) as info:
        train_head(store, tmp_path / "h", cfg)
    assert str(info.value) == (
        f"out of memory fitting the pair whitening (--pair-whitening all) of the head's 8 "
        f"output dims: its 2 trained epochs are saved in {tmp_path / 'h'}; finish the head "
        "without training again: rerun with --resume and --pair-whitening 0 (none) or "
        "fewer dims")
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["epochs_done"] == 2 and config["complete"] is False
    assert config["whitening"] is None and not (tmp_path / "h" / "whitening.safetensors").exists()
    assert same_weights(tmp_path / "h", tmp_path / "ref")
    monkeypatch.setattr(loop, "fitted_whitening", real)
    done = train_head(store, tmp_path / "h", TrainConfig(relation="instance", pair_whitening=0,
                                                          **FAST), resume=True)
    assert len(done.records) == 2 and not done.whitened
    assert json.loads((tmp_path / "h" / "config.json").read_text())["complete"] is True
    assert same_weights(tmp_path / "h", tmp_path / "ref")
    assert want.whitened  # the reference, with its memory, was whitened
