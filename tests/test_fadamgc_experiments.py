"""experiments/fadamgc: the paper-scale presets resolve, and the CIFAR-10 preset trains."""

import pickle

import numpy as np
import pytest
import torch

from wirelessfl.report import load_figures
from wirelessfl.run.config import apply_overrides, resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob

RESNET18_D = 11_173_962   # the CIFAR ResNet-18's parameter count (docs/papers/fadamgc.md §5.4)


def test_paper_scale_lists_every_run_with_the_papers_setting():
    figs = {f.name: f for f in load_figures("fadamgc", "paper")}
    table2 = figs["table2"].runs
    assert len(table2) == 2 * 7 * 4   # CIFAR-10/100 x seven methods x four seeds
    for r in table2:
        cfg = resolve(r.raw)
        assert (cfg.data.num_clients, cfg.data.alpha, cfg.local.steps) == (100, 0.1, 60)
        assert cfg.model.name == "resnet18_bn" and cfg.algorithm.hparams.clients_per_round == 10
    assert {resolve(r.raw).data.dataset for r in figs["table2_tiny"].runs} == {"tinyimagenet"}
    # Fig. 4: S = 50 with S~ swept over the paper's values
    tracked = {resolve(r.raw).algorithm.hparams.tracked for r in figs["fig4"].runs
               if r.series == "FAdamGC"}
    assert tracked == {1, 5, 10, 25, 50}


def _cifar10_folder(root, rng, per_batch=2000, test=100):
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    for name, n in [(f"data_batch_{k}", per_batch) for k in range(1, 6)] + [("test_batch", test)]:
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"labels": rng.integers(0, 10, n).tolist()}, fh)


@pytest.mark.slow  # ~10 s a run; the CIFAR reader has its own fast tests
@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_cifar10_preset_smoke_run_on_a_hand_made_folder(tmp_path, engine):
    """Table 2's CIFAR-10 FAdamGC run (ResNet-18 with BatchNorm, n = 100, S = 10, S~ = 5),
    shortened to 1 round of 1 step of batch 8, trains and is timed by §3.7's counts. The
    batched engine holds ten ResNet-18s with their Adam moments at once (about 8 GB on the
    CPU): it is kept out of the default suite."""
    _cifar10_folder(tmp_path, np.random.default_rng(0))
    table2 = next(f for f in load_figures("fadamgc", "paper") if f.name == "table2")
    spec = next(r for r in table2.runs
                if (r.panel, r.series, r.seed) == ("CIFAR-10", "FAdamGC", 0))
    raw = apply_overrides(spec.raw, [f"data.data_dir={tmp_path}", "rounds=1", "local.steps=1",
                                     "local.batch_size=8", f"engine={engine}"])
    exp = open_run(raw).exp
    assert sum(v.numel() for v in exp.initial_state().params.values()) == RESNET18_D
    run_job(RoundsJob(exp), tmp_path / "run", quiet=True)
    rows = RunRecord(tmp_path / "run").rows()
    assert [r["round"] for r in rows] == [0, 1]   # round 0: the initial model
    assert all(np.isfinite(r["test_accuracy"]) and np.isfinite(r["test_loss"]) for r in rows)
    # 3 + S~/S = 3.5 fp32 vectors of d parameters per round over 100 Mbit/s (§3.7, §5.4)
    per_round = 3.5 * RESNET18_D * 32 / 100e6
    assert rows[-1]["sim_time_s"] == pytest.approx(per_round, rel=1e-6)


def test_paper_scale_dry_run_lists_every_run(tmp_path, capsys):
    from wirelessfl.cli import main

    assert main(["figures", "fadamgc", "--scale", "paper", "--dry-run",
                 "--out", str(tmp_path / "report")]) == 0
    lines = capsys.readouterr().out.splitlines()
    figs = load_figures("fadamgc", "paper")
    runs = [ln for ln in lines if ln.startswith("    to do  runs/")]
    assert len(runs) == sum(len(f.runs) for f in figs)
    assert "CIFAR-10 · FAdamGC · seed 3" in "\n".join(runs)
    assert not (tmp_path / "report").exists()   # a dry run writes nothing


def test_dynamic_cifar10_run_loads_the_pretrained_backbone_from_the_data_dir(tmp_path):
    """Table 1's CIFAR-10 runs: ResNet-18 + projection head, ImageNet backbone weights from
    --data-dir (here hand-made), sessions with the proposed initial model; shortened to
    sessions of 1 round, 2 clients per group, 1 step of batch 8 (fingerprints too)."""
    from safetensors.torch import save_file

    from wirelessfl.models import build_model

    _cifar10_folder(tmp_path, np.random.default_rng(0), per_batch=200, test=50)
    donor = build_model("resnet_proj", (3, 32, 32), 10, seed=9)
    save_file({k.replace(".shortcut.", ".downsample."): v for k, v in donor.state_dict().items()
               if not k.startswith(("proj", "fc."))}, str(tmp_path / "resnet18_imagenet.safetensors"))
    table1, = load_figures("dynamic", "paper", only=["table1"])
    spec = next(r for r in table1.runs if (r.panel, r.series, r.seed)
                == ("CIFAR-10 o=0.0 α=0.3 FedACG", "Proposed", 0))
    assert spec.raw["model"]["options"]["pretrained"] == "resnet18_imagenet.safetensors"
    raw = apply_overrides(spec.raw, [f"data.data_dir={tmp_path}", "rounds=4", "local.steps=1",
                                     "local.batch_size=8", "data.num_clients=4",
                                     "population.rounds_per_session=1", "local.schedule_rounds=1",
                                     "initial_model.fingerprint_steps=1",
                                     "initial_model.fingerprint_batch=8", "engine=loop"])
    exp = open_run(raw).exp
    start = exp.initial_state()
    torch.testing.assert_close(start.params["layer4.1.conv2.weight"],
                               donor.state_dict()["layer4.1.conv2.weight"])
    run_job(RoundsJob(exp), tmp_path / "run", quiet=True)
    rows = RunRecord(tmp_path / "run").rows()
    assert [r["session"] for r in rows[1:]] == [0, 1, 2, 3]
    assert "init_weights" in rows[3] and all(np.isfinite(r["active_accuracy"]) for r in rows)
