"""Datasets: in-memory arrays, the standard file formats, and the embedded synthetic set.

Supported names (see :data:`DATASETS`):

- ``fashion_mnist`` and ``mnist``: IDX files (``train-images-idx3-ubyte[.gz]`` ...),
  found in ``data_dir``; without one, Fashion-MNIST is read from the Debian path
  ``/usr/share/datasets/fashion-mnist`` (``apt-get install dataset-fashion-mnist``). An
  explicit ``data_dir`` is the only place looked in: it never falls back;
- ``cifar10`` and ``cifar100``: the python pickles (``cifar-10-batches-py/``,
  ``cifar-100-python/``) in ``data_dir``;
- ``tinyimagenet``: the standard ``tiny-imagenet-200/`` folder in ``data_dir`` (``wnids.txt``,
  ``train/<wnid>/images/*.JPEG``, ``val/images/*.JPEG`` with ``val/val_annotations.txt``);
  200 classes of 64×64 RGB images, the labelled ``val`` split serving as the test set (the
  ``test`` images carry no labels), as in FAdamGC's image experiments (``docs/papers/fadamgc.md`` §4.1);
- ``svhn``: the standard ``train_32x32.mat`` / ``test_32x32.mat`` (MATLAB v5, read with
  :func:`scipy.io.loadmat`, data only) in ``data_dir`` or ``data_dir/svhn``; label 10 is the
  digit 0 (stored as class 0), normalised with the dynamic-clients paper's statistics
  (``docs/papers/dynamic_clients.md`` §4.1); the ``extra`` split is not used;
- ``synthetic``: Synthetic(α, β) of Li et al., "Federated Optimization in Heterogeneous
  Networks" (FedProx, MLSys 2020) as packaged by LEAF. It needs no files and comes with a
  natural per-client split.

Normalisation follows the specs: HIST (``docs/papers/hist.md`` §6.1) uses mean 0.5 / std 0.5 per
channel for Fashion-MNIST and CIFAR-10; FedAST (``docs/papers/fedast.md`` §4.4) uses (0.1307, 0.3081)
for MNIST and the CIFAR-100 statistics below. ``normalization="auto"`` picks these per dataset;
any named entry of :data:`NORMALIZATIONS` or ``"none"`` can be asked for instead.
"""

from __future__ import annotations

import gzip
import json
import pickle
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from typing_extensions import override

from channels.validation import as_float, as_int, check_memory
from wirelessfl.data import text
from wirelessfl.data.arrays import ArrayDataset, DataFileError, DataNotFoundError, DatasetSplits
from wirelessfl.errors import parse_json, plugin_hint, short

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

#: Named (mean, std) per channel.
NORMALIZATIONS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "half": ((0.5,), (0.5,)),
    "half3": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2861,), (0.3530,)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "tinyimagenet": ((0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

_AUTO_NORMALIZATION = {
    "fashion_mnist": "half",  # HIST §6.1 [code]
    "mnist": "mnist",  # FedAST §4.4 [code]
    "cifar10": "half3",  # HIST §6.1, FedAST §4.4
    "cifar100": "cifar100",  # FedAST §4.4 [code]
    "tinyimagenet": "tinyimagenet",  # the training set's channel statistics [default]
    "svhn": "svhn",  # docs/papers/dynamic_clients.md §4.1 [code]
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler for the CIFAR python files: numpy arrays, lists, dicts and bytes only.

    Any other global (the way a pickle runs code) is refused, so a planted file cannot
    execute anything.
    """

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    @override
    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module[:40]}.{name[:40]} is not allowed")
        return super().find_class(module, name)


# --------------------------------------------------------------------------- file formats


def _open_maybe_gz(path: Path) -> bytes:
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataFileError(f"{path} cannot be read ({type(exc).__name__}: "
                            f"{str(exc)[:80]}); the file is damaged or truncated") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzip-compressed or not.

    Returns
    -------
    ndarray
        The array with the shape and dtype stored in the file header.
    """
    raw = _open_maybe_gz(Path(path))
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataFileError(f"{path} is not an IDX file (bad magic number)")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise DataFileError(f"{path}: unknown IDX element type 0x{raw[2]:02x}")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DataFileError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    itemsize = np.dtype(dtypes[raw[2]]).itemsize
    if (len(raw) - 4 - 4 * ndim) % itemsize:
        raise DataFileError(f"{path}: truncated IDX data")
    data = np.frombuffer(raw, dtype=dtypes[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape, dtype=object)):
        raise DataFileError(f"{path}: header says shape {shape} but holds {data.size} values")
    return data.reshape(shape)


def _find_idx(stem: str, dirs: Sequence[Path]) -> Path | None:
    for d in dirs:
        for name in (stem, stem + ".gz"):
            if (d / name).is_file():
                return d / name
    return None


def _idx_dirs(name: str, data_dir: Path | None) -> list[Path]:
    subdirs = {
        "fashion_mnist": ["", "fashion-mnist", "fashion_mnist", "FashionMNIST/raw"],
        "mnist": ["", "mnist", "MNIST/raw"],
    }[name]
    if data_dir is not None:  # an explicit folder is the only place looked in (no fallback)
        return [data_dir / s for s in subdirs]
    return [DEBIAN_FASHION_MNIST] if name == "fashion_mnist" else []


@lru_cache(maxsize=4)
def _load_idx_raw(name: str, data_dir: Path | None) -> tuple[np.ndarray, ...]:
    dirs = _idx_dirs(name, data_dir)
    stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    paths = [_find_idx(s, dirs) for s in stems]
    if any(p is None for p in paths):
        if data_dir is not None:  # an explicit folder is the only place looked in
            hint = (f"put the four IDX files there (e.g. link those of {DEBIAN_FASHION_MNIST}), "
                    "or leave data_dir unset to read the system copy"
                    if name == "fashion_mnist" else "put the four MNIST IDX files there")
        else:
            hint = ("install it with `apt-get install dataset-fashion-mnist` or pass --data-dir"
                    if name == "fashion_mnist"
                    else "pass --data-dir pointing at a folder with the MNIST IDX files")
        missing = stems[[p is None for p in paths].index(True)]
        raise DataNotFoundError(
            f"dataset {name!r}: file {missing}[.gz] not found in "
            f"{', '.join(str(d) for d in dirs) or '(no folder given)'}; {hint}"
        )
    return tuple(read_idx(p) for p in paths)  # type: ignore[arg-type]


def _unpickle(path: Path) -> dict:
    """A CIFAR batch file: only arrays and plain containers are rebuilt (no code runs)."""
    try:
        with open(path, "rb") as fh:
            out = _ArrayUnpickler(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, OSError, MemoryError) as exc:
        raise DataFileError(f"{path} is not a CIFAR python batch ({type(exc).__name__}: "
                            f"{str(exc)[:80]}); re-download the 'CIFAR python version'") from None
    if not isinstance(out, dict):
        raise DataFileError(f"{path} is not a CIFAR python batch (not a dict)")
    return out


@lru_cache(maxsize=2)
def _load_cifar_raw(name: str, data_dir: Path | None) -> tuple[np.ndarray, ...]:
    folder, train_files, test_file, key = {
        "cifar10": ("cifar-10-batches-py", [f"data_batch_{k}" for k in range(1, 6)],
                    "test_batch", b"labels"),
        "cifar100": ("cifar-100-python", ["train"], "test", b"fine_labels"),
    }[name]
    candidates = [data_dir / folder, data_dir] if data_dir is not None else []
    root = next((c for c in candidates if (c / test_file).is_file()), None)
    if root is None:
        raise DataNotFoundError(
            f"dataset {name!r}: folder {folder}/ with the python pickles not found"
            f"{' in ' + str(data_dir) if data_dir else ''}; pass --data-dir pointing at the "
            f"folder that holds {folder}/ (the 'CIFAR python version' download)"
        )

    def read(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for f in files:
            part = _unpickle(root / f)
            x, y = np.asarray(part.get(b"data")), np.asarray(part.get(key))
            if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or y.ndim != 1 \
                    or len(y) != len(x) or y.dtype.kind not in "iu":
                raise DataFileError(f"{root / f}: expected uint8 'data' of shape (n, 3072) and "
                                    f"n integer labels; the file is damaged")
            xs.append(x)
            ys.append(y.astype(np.int64))
        return np.concatenate(xs).reshape(-1, 3, 32, 32), np.concatenate(ys)

    return (*read(train_files), *read([test_file]))


SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")


@lru_cache(maxsize=1)
def _load_svhn_raw(name: str, data_dir: Path | None) -> tuple[np.ndarray, ...]:
    """SVHN's cropped-digit ``.mat`` files: X (32, 32, 3, n) uint8, y (n, 1) in 1..10."""
    import scipy.io

    candidates = [data_dir, data_dir / "svhn"] if data_dir is not None else []
    root = next((c for c in candidates if all((c / f).is_file() for f in SVHN_FILES)), None)
    if root is None:
        raise DataNotFoundError(
            f"dataset 'svhn': {' and '.join(SVHN_FILES)} not found"
            f"{' in ' + str(data_dir) if data_dir else ''}; pass --data-dir pointing at the "
            "folder that holds them (the 'Format 2: cropped digits' files)")

    def read(path: Path) -> tuple[np.ndarray, np.ndarray]:
        check_memory(5.0 * path.stat().st_size, f"SVHN file {path.name} in memory",
                     "raise WIRELESSFL_MAX_BYTES or use a machine with more memory")
        try:
            mat = scipy.io.loadmat(path, variable_names=["X", "y"])
        except (ValueError, TypeError, OSError, NotImplementedError) as exc:
            raise DataFileError(f"{path} is not an SVHN .mat file ({type(exc).__name__}: "
                                f"{str(exc)[:80]}); re-download it") from None
        x, y = mat.get("X"), mat.get("y")
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray) or x.dtype != np.uint8 \
                or x.shape[:3] != (32, 32, 3) or x.ndim != 4 or y.size != x.shape[3] \
                or y.dtype.kind not in "iuf":
            raise DataFileError(f"{path}: expected uint8 X of shape (32, 32, 3, n) and n labels "
                                "y; the file is damaged")
        y = y.reshape(-1)
        if not np.all((y >= 1) & (y <= 10) & (y == np.round(y))):
            raise DataFileError(f"{path}: labels must be the digits 1..10 (10 for 0)")
        return (np.ascontiguousarray(x.transpose(3, 2, 0, 1)),   # (n, 3, 32, 32)
                (y.astype(np.int64) % 10))

    return (*read(root / SVHN_FILES[0]), *read(root / SVHN_FILES[1]))


TINY_FOLDER = "tiny-imagenet-200"


def _read_rgb64(path: Path) -> np.ndarray:
    """One Tiny ImageNet JPEG as a (3, 64, 64) uint8 array (grayscale images are expanded)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            if im.size != (64, 64):
                raise DataFileError(f"{path}: a Tiny ImageNet image must be 64×64, got "
                                    f"{im.size[0]}×{im.size[1]}")
            return np.asarray(im.convert("RGB"), dtype=np.uint8).transpose(2, 0, 1)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        if isinstance(exc, DataFileError):
            raise
        raise DataFileError(f"{path}: not a readable image ({type(exc).__name__}); the "
                            f"{TINY_FOLDER} download is damaged") from None


@lru_cache(maxsize=1)
def _load_tiny_raw(name: str, data_dir: Path | None) -> tuple[np.ndarray, ...]:
    """Tiny ImageNet's train and val splits as uint8 arrays, labels by ``wnids.txt`` order."""
    candidates = [data_dir / TINY_FOLDER, data_dir] if data_dir is not None else []
    root = next((c for c in candidates if (c / "wnids.txt").is_file()), None)
    if root is None:
        raise DataNotFoundError(
            f"dataset 'tinyimagenet': folder {TINY_FOLDER}/ (with wnids.txt, train/, val/) not "
            f"found{' in ' + str(data_dir) if data_dir else ''}; pass --data-dir pointing at "
            f"the folder that holds {TINY_FOLDER}/ (the standard tiny-imagenet-200.zip, unzipped)")
    wnids = [w.strip() for w in (root / "wnids.txt").read_text().splitlines() if w.strip()]
    if not 0 < len(wnids) <= 200 or len(set(wnids)) != len(wnids) or any("/" in w or w.startswith(".")
                                                         for w in wnids):
        raise DataFileError(f"{root / 'wnids.txt'}: expected one distinct class id per line "
                            "(at most 200)")
    label = {w: i for i, w in enumerate(wnids)}
    train = [(f, label[w]) for w in wnids
             for f in sorted((root / "train" / w / "images").glob("*.JPEG"))]
    ann = root / "val" / "val_annotations.txt"
    if not ann.is_file():
        raise DataNotFoundError(f"dataset 'tinyimagenet': {ann} not found; the val split "
                                "(the test set here) needs its annotations")
    val = []
    for line in ann.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or parts[1] not in label or "/" in parts[0]:
            raise DataFileError(f"{ann}: line {line[:60]!r} is not 'file<TAB>wnid ...' with a "
                                "class of wnids.txt")
        val.append((root / "val" / "images" / parts[0], label[parts[1]]))
    if not train or not val:
        raise DataFileError(f"{root}: no training images under train/<wnid>/images/ or no "
                            "val annotations")
    check_memory(3 * 64 * 64 * 5.0 * (len(train) + len(val)), "Tiny ImageNet in memory",
                 "raise WIRELESSFL_MAX_BYTES or use a machine with more memory")

    def read(items: list[tuple[Path, int]]) -> tuple[np.ndarray, np.ndarray]:
        return (np.stack([_read_rgb64(f) for f, _ in items]),
                np.array([y for _, y in items], dtype=np.int64))

    return (*read(train), *read(val))


def _to_dataset(x: np.ndarray, y: np.ndarray, num_classes: int,
                mean_std: tuple[tuple[float, ...], tuple[float, ...]] | None) -> ArrayDataset:
    xt = torch.from_numpy(x.astype(np.float32)).div_(255.0)
    if xt.dim() == 3:
        xt = xt.unsqueeze(1)
    if mean_std is not None:
        mean, std = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in mean_std)
        xt = (xt - mean) / std
    return ArrayDataset(xt.contiguous(), torch.from_numpy(y.astype(np.int64)), num_classes)


def _resolve_normalization(name: str, normalization: str):
    if normalization == "none":
        return None
    key = _AUTO_NORMALIZATION[name] if normalization == "auto" else normalization
    if key not in NORMALIZATIONS:
        raise ValueError(
            f"`normalization` must be 'auto', 'none' or one of {sorted(NORMALIZATIONS)}, "
            f"got {normalization!r}"
        )
    mean, std = NORMALIZATIONS[key]
    channels = 1 if name in ("mnist", "fashion_mnist") else 3
    if len(mean) != channels:
        raise ValueError(f"normalization {key!r} has {len(mean)} channels; {name} has {channels}")
    return mean, std


# --------------------------------------------------------------------------- synthetic


def synthetic(alpha: float, beta: float, num_clients: int, rng: np.random.Generator,
              *, dim: int = 60, num_classes: int = 10, samples_per_client: int | None = None,
              test_fraction: float = 0.2) -> DatasetSplits:
    """Synthetic(α, β) federated data (FedProx, Li et al. 2020; LEAF ``synthetic``).

    Client k draws u_k ~ N(0, α) and B_k ~ N(0, β); its model W_k ~ N(u_k, 1) (C × F),
    b_k ~ N(u_k, 1) (C); its inputs x ~ N(v_k, Σ) with v_k ~ N(B_k, 1) and
    Σ = diag(j^-1.2); its labels y = argmax(W_k x + b_k). α controls how much the client
    models differ, β how much their inputs differ.

    Parameters
    ----------
    alpha, beta : float
        Heterogeneity of models and of inputs (≥ 0); (0, 0) is the FedProx "IID-like" case.
    num_clients : int
        Number of clients.
    rng : numpy.random.Generator
        Source of randomness.
    dim, num_classes : int
        Input dimension F (60) and classes C (10).
    samples_per_client : int or None
        Fixed per-client sample count; None uses the FedProx draw
        ``lognormal(4, 2) + 50``, capped at 1000 **[default]** to keep runs short.
    test_fraction : float
        Share of each client's samples held out; the test set is their union (LEAF convention).

    Returns
    -------
    DatasetSplits
        With ``natural_partition`` giving each client's training indices.
    """
    num_clients = as_int("num_clients", num_clients, lo=1, hi=10**7)
    alpha, beta = as_float("alpha", alpha, lo=0, hi=1e6), as_float("beta", beta, lo=0, hi=1e6)
    dim = as_int("dim", dim, lo=1, hi=10**6)
    num_classes = as_int("num_classes", num_classes, lo=2, hi=10**6)
    test_fraction = as_float("test_fraction", test_fraction, lo=0, hi=1, hi_open=True)
    if samples_per_client is not None:
        samples_per_client = as_int("samples_per_client", samples_per_client, lo=1, hi=10**9)
    # float64 draws and the float32 copy, at the largest count (1000 with the FedProx draw)
    most = float(num_clients) * (samples_per_client or 1000)
    check_memory(most * (dim * 8 + num_classes * 8 + 16),
                 f"synthetic data of {num_clients} clients x {samples_per_client or '<= 1000'} "
                 f"samples x {dim} features", "use fewer clients or samples per client")
    if samples_per_client is None:
        counts = np.minimum(rng.lognormal(4, 2, num_clients).astype(int) + 50, 1000)
    else:
        counts = np.full(num_clients, samples_per_client)
    sigma = np.arange(1, dim + 1, dtype=np.float64) ** -1.2
    tests = np.array([int(round(test_fraction * c)) for c in counts], np.int64)
    ends_tr, ends_te = np.cumsum(counts - tests), np.cumsum(tests)
    # filled in place, client by client: the set's memory once (10^5 clients of 784 features)
    x_tr = np.empty((int(ends_tr[-1]), dim), np.float32)
    x_te = np.empty((int(ends_te[-1]), dim), np.float32)
    y_tr, y_te = np.empty(len(x_tr), np.int64), np.empty(len(x_te), np.int64)
    parts = []
    for k in range(num_clients):
        u_k, b_k = rng.normal(0, np.sqrt(alpha)), rng.normal(0, np.sqrt(beta))
        w = rng.normal(u_k, 1, (num_classes, dim))
        b = rng.normal(u_k, 1, num_classes)
        v = rng.normal(b_k, 1, dim)
        x = rng.normal(v, np.sqrt(sigma), (counts[k], dim))
        y = np.argmax(x @ w.T + b, axis=1)
        n_test, lo, at = int(tests[k]), int(ends_tr[k] - (counts[k] - tests[k])), int(ends_te[k] - tests[k])
        x_te[at:at + n_test], y_te[at:at + n_test] = x[:n_test], y[:n_test]
        x_tr[lo:int(ends_tr[k])], y_tr[lo:int(ends_tr[k])] = x[n_test:], y[n_test:]
        parts.append(np.arange(lo, int(ends_tr[k])))

    return DatasetSplits("synthetic",
                         ArrayDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr), num_classes),
                         ArrayDataset(torch.from_numpy(x_te), torch.from_numpy(y_te), num_classes),
                         tuple(parts))


# --------------------------------------------------------------------------- shakespeare

#: LEAF's Shakespeare alphabet (80 characters); a character's class is its position.
LEAF_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnop"
                "qrstuvwxyz}")


def _leaf_users(folder: Path) -> dict[str, dict[str, list]]:
    users: dict[str, dict[str, list]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            doc = parse_json(path.read_text(), str(path))
            for user, data in doc["user_data"].items():
                x, y = data["x"], data["y"]
                if not (isinstance(x, list) and isinstance(y, list) and len(x) == len(y)
                        and all(isinstance(s, str) for s in x + y)):
                    raise ValueError("x and y must be lists of strings of equal length")
                entry = users.setdefault(str(user), {"x": [], "y": []})
                entry["x"] += x
                entry["y"] += y
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError,
                AttributeError, ValueError) as exc:
            raise DataFileError(f"{path} is not a LEAF JSON file ({type(exc).__name__}: "
                                f"{str(exc)[:80]})") from None
    return users


def _encode(text: list[str]) -> np.ndarray:
    table = {c: i for i, c in enumerate(LEAF_LETTERS)}
    return np.array([[table.get(c, 0) for c in s] for s in text], dtype=np.int64).reshape(
        len(text), -1)


def shakespeare(folder: Path | None, num_clients: int, rng: np.random.Generator) -> DatasetSplits:
    """LEAF Shakespeare (``docs/papers/fedast.md`` §4.5): next-character prediction, one role per client.

    Reads LEAF's JSON files under ``<data_dir>/shakespeare/{train,test}/`` (or
    ``<data_dir>/{train,test}/``), made with ``-s niid --sf 1.0 -k 0 -t sample -tf 0.8``.
    Inputs are 80-character windows as class indices (float tensors holding integers, so
    they batch like images; the model embeds them), labels the next character. Roles are
    matched to the ``num_clients`` clients at random, reused when there are fewer roles
    (§4.5 [code]); the test set is the union of all roles' test samples.
    """
    roots = [] if folder is None else [folder / "shakespeare", folder]
    root = next((r for r in roots if (r / "train").is_dir() and (r / "test").is_dir()), None)
    if root is None:
        raise DataNotFoundError("Shakespeare needs LEAF's JSON files: pass --data-dir holding "
                                "shakespeare/train/*.json and shakespeare/test/*.json (LEAF "
                                "preprocess.sh -s niid --sf 1.0 -k 0 -t sample -tf 0.8)")
    train, test = _leaf_users(root / "train"), _leaf_users(root / "test")
    for split, users in (("train", train), ("test", test)):
        lengths = {len(s) for u in users.values() for s in u["x"]}
        if len(lengths) > 1 or any(len(s) != 1 for u in users.values() for s in u["y"]):
            raise DataFileError(f"{root / split}: LEAF windows must all have one length and "
                                f"labels one character (got window lengths {sorted(lengths)[:4]})")
    names = sorted(train)
    if not names:
        raise DataNotFoundError(f"{root / 'train'} holds no LEAF users")
    xs, ys, parts, start = [], [], [], 0
    for name in names:
        xs.append(_encode(train[name]["x"]))
        ys.append(_encode(train[name]["y"])[:, 0])
        parts.append(np.arange(start, start + len(ys[-1])))
        start += len(ys[-1])
    roles = rng.choice(len(names), num_clients, replace=num_clients > len(names))
    test_x = [_encode(test[n]["x"]) for n in sorted(test)]
    test_y = [_encode(test[n]["y"])[:, 0] for n in sorted(test)]
    k = len(LEAF_LETTERS)

    def make(x: list[np.ndarray], y: list[np.ndarray]) -> ArrayDataset:
        return ArrayDataset(torch.as_tensor(np.concatenate(x), dtype=torch.float32),
                            torch.as_tensor(np.concatenate(y)), k)

    return DatasetSplits("shakespeare", make(xs, ys), make(test_x, test_y),
                         tuple(parts[r] for r in roles))


# --------------------------------------------------------------------------- registry

DATASETS = ("fashion_mnist", "mnist", "cifar10", "cifar100", "tinyimagenet", "synthetic",
            "shakespeare", "svhn")
_NUM_CLASSES = {"fashion_mnist": 10, "mnist": 10, "cifar10": 10, "cifar100": 100,
                "tinyimagenet": 200, "svhn": 10}


#: Datasets added by :func:`register_dataset`: name → loader(data_dir) → DatasetSplits.
USER_DATASETS: dict[str, Callable[[Path | None], DatasetSplits]] = {}


def register_dataset(name: str, loader: Callable[[Path | None], DatasetSplits]) -> None:
    """Add a dataset under ``name``, from a user's own code; configs then name it.

    ``loader(data_dir)`` gets ``data.data_dir`` (a folder, or None) and returns a
    :class:`~wirelessfl.data.arrays.DatasetSplits` of in-memory train and test sets; the
    partitioners, engines and reports then treat it as any built-in dataset. The returned
    sets are checked (float inputs, integer labels, equal lengths, finite values).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"`name` must be an identifier such as 'my_data', got {short(name)}")
    if name in DATASETS + text.TEXT_DATASETS or name in USER_DATASETS:
        raise ValueError(f"`name` {name!r} is a dataset already; choose another name")
    if not callable(loader):
        raise TypeError(f"`loader` must be a function data_dir -> DatasetSplits, got {short(loader)}")
    USER_DATASETS[name] = loader


def _user_dataset(name: str, folder: Path | None) -> DatasetSplits:
    splits = USER_DATASETS[name](folder)
    if not isinstance(splits, DatasetSplits):
        raise TypeError(f"the loader of dataset {name!r} must return a DatasetSplits, got "
                        f"{type(splits).__name__}")
    for split, ds in (("train", splits.train), ("test", splits.test)):
        if not isinstance(ds, ArrayDataset) or not ds.x.is_floating_point() \
                or ds.y.dtype != torch.long or len(ds.x) != len(ds.y) or not len(ds.y) \
                or not bool(torch.isfinite(ds.x).all()):
            raise DataFileError(f"dataset {name!r}: its {split} set must be an ArrayDataset of "
                                "finite float inputs and as many int64 labels (at least one)")
        k = ds.num_classes
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise DataFileError(f"dataset {name!r}: its {split} set's num_classes must be an "
                                f"integer >= 2, got {k!r}")
        lo, hi = int(ds.y.min()), int(ds.y.max())
        if lo < 0 or hi >= k:
            raise DataFileError(f"dataset {name!r}: its {split} labels run {lo}..{hi}, outside "
                                f"[0, {k}) of its num_classes = {k}; relabel them 0..{k - 1}")
    if splits.train.sample_shape != splits.test.sample_shape:
        raise DataFileError(f"dataset {name!r}: train samples of shape "
                            f"{splits.train.sample_shape} and test samples of shape "
                            f"{splits.test.sample_shape} differ; one model cannot read both")
    if splits.train.num_classes != splits.test.num_classes:
        raise DataFileError(f"dataset {name!r}: train has {splits.train.num_classes} classes "
                            f"and test {splits.test.num_classes}; give both the same num_classes")
    return splits


def load_dataset(name: str, *, data_dir: str | Path | None = None, normalization: str = "auto",
                 rng: np.random.Generator | None = None, num_clients: int | None = None,
                 synthetic_alpha: float = 1.0, synthetic_beta: float = 1.0,
                 synthetic_dim: int = 60,
                 samples_per_client: int | None = None, tokenizer: str | None = None,
                 max_length: int = 128) -> DatasetSplits:
    """Load a dataset by registry name.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    data_dir : path or None
        Folder with the dataset files (IDX for MNIST/Fashion-MNIST, pickles for CIFAR).
    normalization : str
        ``"auto"`` (the specs' choice per dataset), ``"none"`` or a key of
        :data:`NORMALIZATIONS`. Ignored for ``synthetic``.
    rng, num_clients, synthetic_alpha, synthetic_beta, synthetic_dim, samples_per_client
        Used by ``synthetic`` and ``shakespeare`` (see :func:`synthetic`, :func:`shakespeare`).
    tokenizer, max_length
        Text datasets (:mod:`wirelessfl.data.text`): the local tokenizer folder and tokens
        per sample.
    """
    if name not in DATASETS + text.TEXT_DATASETS and name not in USER_DATASETS:
        raise ValueError(f"unknown dataset {short(name)}{plugin_hint('dataset')}; choose one of "
                         f"{', '.join(DATASETS + text.TEXT_DATASETS + tuple(USER_DATASETS))}")
    folder = Path(data_dir).expanduser().resolve() if data_dir is not None else None
    if folder is not None and not folder.is_dir():
        raise DataNotFoundError(f"--data-dir {data_dir} is not a folder")
    if name in USER_DATASETS:
        return _user_dataset(name, folder)
    if name == "synthetic":
        if rng is None or num_clients is None:
            raise ValueError("dataset 'synthetic' needs `rng` and `num_clients`")
        return synthetic(synthetic_alpha, synthetic_beta, num_clients, rng, dim=synthetic_dim,
                         samples_per_client=samples_per_client)
    if name in text.TEXT_DATASETS:
        return text.load_text(name, folder, tokenizer, max_length)
    if name == "shakespeare":
        if rng is None or num_clients is None:
            raise ValueError("dataset 'shakespeare' needs `rng` and `num_clients`")
        return shakespeare(folder, num_clients, rng)
    mean_std = _resolve_normalization(name, normalization)
    loader = (_load_idx_raw if name in ("mnist", "fashion_mnist") else
              _load_tiny_raw if name == "tinyimagenet" else
              _load_svhn_raw if name == "svhn" else _load_cifar_raw)
    x_tr, y_tr, x_te, y_te = loader(name, folder)
    k = _NUM_CLASSES[name]
    for x, y, split in ((x_tr, y_tr, "train"), (x_te, y_te, "test")):
        if len(x) != len(y) or len(y) == 0 or y.min() < 0 or y.max() >= k:
            raise DataFileError(f"dataset {name!r}: the {split} files hold {len(x)} images and "
                                f"{len(y)} labels (labels must be 0..{k - 1}); they are damaged "
                                "or do not belong together")
    return DatasetSplits(name, _to_dataset(x_tr, y_tr, k, mean_std),
                         _to_dataset(x_te, y_te, k, mean_std))
