import gzip
import pickle

import numpy as np
import pytest
import torch

from wirelessfl.data import DataNotFoundError, load_dataset, read_idx, synthetic
from wirelessfl.data.arrays import DataFileError


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


def _tiny_folder(root, rng, wnids=("n01", "n02", "n03"), per_class=3):
    from PIL import Image

    base = root / "tiny-imagenet-200"
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for w in wnids:
        (base / "train" / w / "images").mkdir(parents=True)
        for k in range(per_class):
            img = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
            Image.fromarray(img).save(base / "train" / w / "images" / f"{w}_{k}.JPEG", quality=95)
    gray = Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8), mode="L")
    gray.save(base / "val" / "images" / "val_0.JPEG")  # Tiny ImageNet has grayscale images
    lines = ["val_0.JPEG\tn02\t0\t0\t63\t63"]
    for k, w in enumerate(wnids, 1):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
            base / "val" / "images" / f"val_{k}.JPEG")
        lines.append(f"val_{k}.JPEG\t{w}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return base


def test_tinyimagenet_folder(tmp_path):
    from PIL import Image

    base = _tiny_folder(tmp_path, np.random.default_rng(4))
    splits = load_dataset("tinyimagenet", data_dir=tmp_path)
    assert splits.train.x.shape == (9, 3, 64, 64) and splits.train.num_classes == 200
    assert splits.train.labels().tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # wnids.txt order
    assert splits.test.labels().tolist() == [1, 0, 1, 2]
    # a grayscale image is expanded to three equal channels before normalisation
    raw = np.asarray(Image.open(base / "val" / "images" / "val_0.JPEG"), dtype=np.float64)
    mean, std = (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)
    for c in range(3):
        expect = (raw[5, 7] / 255 - mean[c]) / std[c]
        assert splits.test.x[0, c, 5, 7].item() == pytest.approx(expect, rel=1e-5)


def test_tinyimagenet_bad_folders_are_one_line_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="tiny-imagenet-200"):
        load_dataset("tinyimagenet", data_dir=tmp_path)
    base = _tiny_folder(tmp_path, np.random.default_rng(5))
    (base / "train" / "n01" / "images" / "n01_0.JPEG").write_bytes(b"\x00not a jpeg")
    with pytest.raises(DataFileError, match="not a readable image"):
        load_dataset("tinyimagenet", data_dir=tmp_path / "tiny-imagenet-200")
    (base / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99\n")
    with pytest.raises(DataFileError, match="wnids.txt"):
        load_dataset("tinyimagenet", data_dir=tmp_path)


def _svhn_mat(path, rng, n, labels=None):
    import scipy.io

    y = rng.integers(1, 11, n) if labels is None else np.asarray(labels)
    scipy.io.savemat(path, {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                            "y": y.reshape(-1, 1).astype(np.uint8)})


def test_svhn_mat_files(tmp_path):
    import scipy.io

    rng = np.random.default_rng(3)
    (tmp_path / "svhn").mkdir()
    _svhn_mat(tmp_path / "svhn" / "train_32x32.mat", rng, 6, labels=[10, 1, 2, 3, 9, 10])
    _svhn_mat(tmp_path / "svhn" / "test_32x32.mat", rng, 4)
    splits = load_dataset("svhn", data_dir=tmp_path)
    assert splits.train.x.shape == (6, 3, 32, 32) and len(splits.test) == 4
    assert splits.train.y.tolist() == [0, 1, 2, 3, 9, 0]   # label 10 is the digit 0
    raw = scipy.io.loadmat(tmp_path / "svhn" / "train_32x32.mat")["X"]
    # image 1, green channel, pixel (row 5, col 7), normalised with §4.1's statistics
    expected = (raw[5, 7, 1, 1] / 255 - 0.4438) / 0.2010
    assert splits.train.x[1, 1, 5, 7].item() == pytest.approx(expected, rel=1e-5)


def test_svhn_bad_files_are_one_line_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="--data-dir"):
        load_dataset("svhn", data_dir=tmp_path)
    rng = np.random.default_rng(4)
    _svhn_mat(tmp_path / "test_32x32.mat", rng, 3)
    (tmp_path / "train_32x32.mat").write_bytes(b"not a matlab file at all" * 10)
    with pytest.raises(ValueError, match="not an SVHN .mat file") as exc:
        load_dataset("svhn", data_dir=tmp_path)
    assert "\n" not in str(exc.value)
    _svhn_mat(tmp_path / "train_32x32.mat", rng, 3, labels=[1, 11, 2])
    with pytest.raises(ValueError, match="digits 1..10"):
        load_dataset("svhn", data_dir=tmp_path)
