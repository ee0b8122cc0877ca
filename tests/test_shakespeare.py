"""LEAF Shakespeare: the JSON reader, role-to-client matching, and the LSTM (loop = batched, learns)."""

import json

import numpy as np
import pytest
import torch

from wirelessfl.data import DataNotFoundError, load_dataset
from wirelessfl.data.datasets import LEAF_LETTERS
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD, evaluate
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import build_model

TEXT = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer. "


def _leaf(folder, users, split, offset):
    data = {}
    for u in range(users):
        text = TEXT * 6
        starts = range(offset + 3 * u, offset + 3 * u + 40)
        data[f"ROLE_{u}"] = {"x": [text[s:s + 80] for s in starts],
                             "y": [text[s + 80] for s in starts]}
    doc = {"users": list(data), "num_samples": [40] * users, "user_data": data}
    (folder / "shakespeare" / split).mkdir(parents=True, exist_ok=True)
    (folder / "shakespeare" / split / "all_data.json").write_text(json.dumps(doc))


@pytest.fixture
def leaf(tmp_path):
    _leaf(tmp_path, 5, "train", 0)
    _leaf(tmp_path, 2, "test", 7)
    return tmp_path


def test_reader_matches_roles_to_clients_and_encodes_characters(leaf):
    splits = load_dataset("shakespeare", data_dir=leaf, rng=np.random.default_rng(0), num_clients=8)
    assert len(splits.train) == 200 and len(splits.test) == 80
    assert splits.train.sample_shape == (80,) and splits.train.num_classes == len(LEAF_LETTERS) == 80
    parts = splits.natural_partition
    assert len(parts) == 8 and all(len(p) == 40 for p in parts)
    assert len({int(p[0]) for p in parts}) <= 5            # 8 clients from 5 roles: reuse
    first = "".join(LEAF_LETTERS[int(c)] for c in splits.train.x[0])
    assert first == (TEXT * 6)[:80] and LEAF_LETTERS[int(splits.train.y[0])] == (TEXT * 6)[80]


def test_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(DataNotFoundError, match="LEAF"):
        load_dataset("shakespeare", data_dir=tmp_path, rng=np.random.default_rng(0), num_clients=3)


def test_lstm_batched_equals_loop_and_learns(leaf):
    splits = load_dataset("shakespeare", data_dir=leaf, rng=np.random.default_rng(0), num_clients=4)
    model = build_model("char_lstm", (80,), 80, seed=0)
    hp = LocalHParams(lr=2.0, batch_size=16, steps=5)
    tasks = [ClientTask(client=i, params=model.params(), indices=p, seed=i)
             for i, p in enumerate(splits.natural_partition)]
    loop = LoopExecutor("cpu").run(LocalSGD(model, hp), splits.train, tasks, hp)
    stacked = BatchedExecutor("cpu").run(LocalSGD(model, hp), splits.train, tasks, hp)
    for a, b in zip(loop, stacked):
        for k in a.delta:
            torch.testing.assert_close(a.delta[k], b.delta[k], rtol=1e-4, atol=1e-5)
    long = LocalHParams(lr=2.0, batch_size=32, steps=60)
    everyone = np.arange(len(splits.train))
    res = LoopExecutor("cpu").run(LocalSGD(model, long), splits.train,
                                  [ClientTask(client=0, params=model.params(), indices=everyone,
                                              seed=0)], long)[0]
    trained = {k: v - res.delta[k] for k, v in model.params().items()}
    acc, _ = evaluate(model, trained, splits.test)
    assert acc > 0.5  # chance is 1/80; the text repeats
