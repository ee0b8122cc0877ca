import gzip
import pickle

import numpy as np
import pytest
import torch

from wirelessfl.data import DataNotFoundError, load_dataset, read_idx, synthetic


def _write_idx(path, arr):
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as fh:
        fh.write(header + arr.astype(np.uint8).tobytes())


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_roundtrip(tmp_path, suffix):
    arr = np.random.default_rng(0).integers(0, 256, (5, 3, 4), dtype=np.uint8)
    _write_idx(tmp_path / f"a{suffix}", arr)
    np.testing.assert_array_equal(read_idx(tmp_path / f"a{suffix}"), arr)


def test_idx_rejects_bad_magic(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad")


def test_mnist_from_data_dir(tmp_path):
    rng = np.random.default_rng(1)
    for stem, shape in [("train-images-idx3-ubyte", (20, 28, 28)), ("train-labels-idx1-ubyte", (20,)),
                        ("t10k-images-idx3-ubyte", (6, 28, 28)), ("t10k-labels-idx1-ubyte", (6,))]:
        hi = 10 if "labels" in stem else 256
        _write_idx(tmp_path / (stem + ".gz"), rng.integers(0, hi, shape))
    splits = load_dataset("mnist", data_dir=tmp_path)
    assert splits.train.x.shape == (20, 1, 28, 28) and splits.test.y.shape == (6,)
    raw = read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    expected = (raw / 255.0 - 0.1307) / 0.3081
    np.testing.assert_allclose(splits.train.x[:, 0].numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,folder,key,files,classes", [
    ("cifar10", "cifar-10-batches-py", b"labels", [f"data_batch_{k}" for k in range(1, 6)], 10),
    ("cifar100", "cifar-100-python", b"fine_labels", ["train"], 100),
])
def test_cifar_pickles(tmp_path, name, folder, key, files, classes):
    rng = np.random.default_rng(2)
    root = tmp_path / folder
    root.mkdir()
    for f in files + (["test_batch"] if name == "cifar10" else ["test"]):
        data = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8),
                key: rng.integers(0, classes, 4).tolist()}
        with open(root / f, "wb") as fh:
            pickle.dump(data, fh)
    splits = load_dataset(name, data_dir=tmp_path)
    assert splits.train.x.shape == (4 * len(files), 3, 32, 32)
    assert splits.train.num_classes == classes and len(splits.test) == 4
    # first pixel of the first image, red channel, normalised per the spec's stats
    with open(root / files[0], "rb") as fh:
        first = pickle.load(fh)[b"data"][0, 0]
    mean, std = {"cifar10": (0.5, 0.5), "cifar100": (0.5071, 0.2675)}[name]
    assert splits.train.x[0, 0, 0, 0].item() == pytest.approx((first / 255 - mean) / std, rel=1e-5)


def test_missing_files_name_the_fix(tmp_path):
    with pytest.raises(DataNotFoundError, match="--data-dir"):
        load_dataset("cifar10", data_dir=tmp_path)
    with pytest.raises(DataNotFoundError, match="MNIST IDX"):
        load_dataset("mnist", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        load_dataset("imagenet")


def test_fashion_mnist_real(fmnist):
    assert fmnist.train.x.shape == (60000, 1, 28, 28) and len(fmnist.test) == 10000
    assert np.bincount(fmnist.train.labels()).tolist() == [6000] * 10
    # HIST normalisation (0.5, 0.5): pixel mean 0.2861 maps to (0.2861 - 0.5) / 0.5
    assert fmnist.train.x.mean().item() == pytest.approx((0.2861 - 0.5) / 0.5, abs=2e-3)


def test_synthetic_is_seeded_and_partitioned():
    a = synthetic(1.0, 1.0, 12, np.random.default_rng(3))
    b = synthetic(1.0, 1.0, 12, np.random.default_rng(3))
    torch.testing.assert_close(a.train.x, b.train.x)
    flat = np.concatenate(a.natural_partition)
    np.testing.assert_array_equal(np.sort(flat), np.arange(len(a.train)))
    assert a.train.sample_shape == (60,) and a.train.num_classes == 10
    sizes = [len(p) for p in a.natural_partition]
    assert min(sizes) >= 40 and max(sizes) <= 1000
