"""Text classification data from local files, tokenised with a model's own local tokenizer.

Nothing is downloaded. Each dataset is looked for in ``<data_dir>/<folder>`` for each of its
folder names (e.g. ``SST-2`` or ``sst2``) and in ``data_dir`` itself, in these layouts:

- the original releases: GLUE TSV (``train.tsv``, ``dev.tsv``: SST-2 ``sentence, label``;
  QNLI ``index, question, sentence, label`` with ``entailment``/``not_entailment``; QQP
  ``id, qid1, qid2, question1, question2, is_duplicate``), AG News CSV (``train.csv``,
  ``test.csv``, no header: class 1–4, title, description), 20 Newsgroups ``bydate`` folders
  (``20news-bydate-train/<group>/<message>`` and ``20news-bydate-test``, read as Latin-1);
- the Hugging Face layouts: ``<split>.csv``, ``<split>.jsonl``/``.json`` (JSON lines), Hub
  parquet shards ``<split>-*.parquet`` (also under ``data/``) and ``save_to_disk`` folders
  ``<split>/data-*.arrow``; parquet and arrow need ``pyarrow`` (the ``[text]`` extra). Columns
  are the GLUE names with an integer ``label``, ``text``/``label`` for AG News and 20 Newsgroups
  (AG News ``title``/``description`` also accepted).

The training split is ``train``; the test split is the labelled ``validation``/``dev`` one for
GLUE (its test labels are hidden, ``docs/papers/fadamgc.md`` §4.2 [D]) and ``test`` for AG News and
20 Newsgroups. AG News joins title + " " + description and maps labels 1–4 to 0–3
(``docs/papers/dynamic_clients.md`` §4.1).

Tokenisation uses ``transformers.AutoTokenizer.from_pretrained(dir, local_files_only=True)``
on a local folder (GPT-2's ``vocab.json``/``merges.txt`` or ``tokenizer.json``; BERT's
``vocab.txt``). Sequences are truncated to ``max_length`` and right-padded; samples are stored
as float32 token ids (exact below 2^24) with padding marked −1, the convention of the text
models (:mod:`wirelessfl.models.text`), so they live in the shared
:class:`~wirelessfl.data.datasets.ArrayDataset`.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset, DataFileError, DataNotFoundError, DatasetSplits, inside
from wirelessfl.errors import ConfigError, parse_json


@dataclass(frozen=True)
class TextTask:
    """A text dataset: where to look, its columns and labels."""

    folders: tuple[str, ...]
    num_classes: int
    test_split: tuple[str, ...]
    columns: tuple[str, ...]          # one text column, or the two of a sentence pair
    label: str = "label"
    tsv: tuple[int, ...] | None = None  # original TSV: text column positions, label position
    label_names: dict[str, int] | None = None
    hint: str = ""


TASKS: dict[str, TextTask] = {
    "sst2": TextTask(("SST-2", "sst2", "glue/sst2"), 2, ("dev", "validation"), ("sentence",),
                     hint="GLUE's SST-2 folder (train.tsv, dev.tsv) or the Hub's glue/sst2 files"),
    "qnli": TextTask(("QNLI", "qnli", "glue/qnli"), 2, ("dev", "validation"),
                     ("question", "sentence"),
                     label_names={"entailment": 0, "not_entailment": 1},
                     hint="GLUE's QNLI folder (train.tsv, dev.tsv) or the Hub's glue/qnli files"),
    "qqp": TextTask(("QQP", "qqp", "glue/qqp"), 2, ("dev", "validation"),
                    ("question1", "question2"), label="is_duplicate",
                    hint="GLUE's QQP folder (train.tsv, dev.tsv) or the Hub's glue/qqp files"),
    "ag_news": TextTask(("ag_news_csv", "ag_news", "ag-news"), 4, ("test",), ("text",),
                        hint="ag_news_csv/ (train.csv, test.csv) or the Hub's ag_news files"),
    "20newsgroups": TextTask(("20news-bydate", "20newsgroups", "20_newsgroups"), 20, ("test",),
                             ("text",),
                             hint="20news-bydate-train/ and 20news-bydate-test/ (the bydate "
                                  "release) or text/label CSV, JSON-lines or parquet files"),
}
TEXT_DATASETS = tuple(TASKS)

Rows = tuple[list[tuple[str, ...]], list[int]]


def load_text(name: str, folder: Path | None, tokenizer: str | None, max_length: int) -> DatasetSplits:
    """Train and test sets of text dataset ``name``, tokenised (see the module docstring)."""
    task = TASKS[name]
    if folder is None:
        raise DataNotFoundError(f"dataset {name!r} is read from local files: pass --data-dir "
                                f"(or data.data_dir) with {task.hint}")
    if tokenizer is None:
        raise DataNotFoundError(f"dataset {name!r} needs data.tokenizer: a local tokenizer "
                                "folder (e.g. gpt2/ with vocab.json and merges.txt, or "
                                "bert-base-uncased/ with vocab.txt), relative to --data-dir")
    tok = load_tokenizer(folder, tokenizer)
    splits = []
    for split in (("train",), task.test_split):
        texts, labels = read_split(name, folder, split)
        splits.append(_encode(tok, texts, labels, task.num_classes, max_length, name))
    return DatasetSplits(name, *splits)


def load_tokenizer(folder: Path | None, name: str):
    """A model's tokenizer from a local folder (relative names from ``folder``), pad = EOS if unset."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise DataNotFoundError("text datasets need Hugging Face transformers: "
                                "pip install 'wirelessfl[text]'") from None
    path = Path(name).expanduser()
    if not path.is_absolute() and folder is not None:
        path = inside(folder, name, "data.tokenizer")
    if not path.is_dir():
        raise DataNotFoundError(f"tokenizer folder {path} not found: give a local folder with "
                                "the model's tokenizer files (tokenizer.json, or vocab.json + "
                                "merges.txt, or vocab.txt)")
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise DataFileError(f"tokenizer folder {path}: cannot be loaded "
                            f"({str(exc).splitlines()[0][:120]})") from None
    if tok.pad_token is None:   # GPT-2: pad = EOS (docs/papers/fadamgc.md §4.2 [D])
        tok.pad_token = tok.eos_token
    return tok


def _encode(tok, texts: list[tuple[str, ...]], labels: list[int], k: int, max_length: int,
            name: str) -> ArrayDataset:
    if not texts:
        raise DataFileError(f"dataset {name!r}: a split has no samples")
    y = np.asarray(labels, dtype=np.int64)
    if y.min() < 0 or y.max() >= k:
        raise DataFileError(f"dataset {name!r}: labels must be 0..{k - 1}, found {y.min()}..{y.max()}")
    first = [t[0] for t in texts]
    second = [t[1] for t in texts] if len(texts[0]) > 1 else None
    enc = tok(first, second, truncation=True, max_length=max_length, padding="max_length")
    ids = np.asarray(enc["input_ids"], dtype=np.int64)
    mask = np.asarray(enc["attention_mask"], dtype=bool)
    ids = np.where(mask, ids, -1).astype(np.float32)
    return ArrayDataset(torch.from_numpy(ids), torch.from_numpy(y), k)


# --------------------------------------------------------------------------- reading


def read_split(name: str, folder: Path, split: tuple[str, ...]) -> Rows:
    """(texts, labels) of one split: the first layout found among the module's."""
    task = TASKS[name]
    roots = [folder / f for f in task.folders] + [folder]
    if name == "20newsgroups":
        for root in [folder, *roots]:
            for s in split:
                d = root / f"20news-bydate-{s}"
                if d.is_dir():
                    return _read_bydate(d)
    for root in roots:
        for s in split:
            for reader, path in _candidates(root, s):
                if path is not None:
                    return _rows(task, reader(path), path, name)
    names = " or ".join(split)
    raise DataNotFoundError(f"dataset {name!r}: no {names} split found under {folder} "
                            f"(looked in {', '.join(str(r) for r in roots[:3])}); expected "
                            f"{task.hint}")


def _candidates(root: Path, s: str) -> list[tuple[Callable, Path | None]]:
    def first(*patterns: str) -> Path | None:
        for p in patterns:
            hits = sorted(root.glob(p))
            if hits:
                return hits[0] if len(hits) == 1 or not p.endswith(".parquet") else hits
        return None

    return [(_read_tsv, first(f"{s}.tsv")), (_read_csv, first(f"{s}.csv")),
            (_read_jsonl, first(f"{s}.jsonl", f"{s}.json")),
            (_read_parquet, first(f"{s}-*.parquet", f"data/{s}-*.parquet", f"{s}.parquet")),
            (_read_arrow, first(f"{s}/data-*.arrow"))]


def _rows(task: TextTask, records: list[dict] | list[list[str]], path, name: str) -> Rows:
    """Texts and integer labels from dict records (header formats) or lists (headerless CSV)."""
    texts, labels = [], []
    where = path if isinstance(path, Path) else path[0]
    for i, rec in enumerate(records):
        try:
            if isinstance(rec, list):  # AG News original: class, title, description
                if len(rec) != 3:
                    raise ValueError(f"{len(rec)} fields, AG News rows have 3")
                texts.append((f"{_text(rec[1])} {_text(rec[2])}",))
                labels.append(_label(rec[0]) - 1)
                continue
            if name == "ag_news" and "text" not in rec and "title" in rec:
                rec = {**rec, "text": f"{_text(rec['title'])} {_text(rec.get('description', ''))}"}
            key = task.label if task.label in rec else "label"
            raw = rec[key]
            label = task.label_names[raw] if task.label_names and isinstance(raw, str) \
                and raw in task.label_names else _label(raw)
            texts.append(tuple(_text(rec[c]) for c in task.columns))
            labels.append(label)
            if not 0 <= labels[-1] < task.num_classes:
                raise ValueError(f"label {labels[-1]} is outside the {task.num_classes} classes "
                                 f"0..{task.num_classes - 1}")
        except (KeyError, ValueError, TypeError) as exc:
            raise DataFileError(f"{where}: row {i + 1} is malformed ({exc.__class__.__name__}: "
                                f"{str(exc)[:80]}); expected columns "
                                f"{', '.join(task.columns)} and {task.label}") from None
    if not texts:
        raise DataFileError(f"{where}: holds no rows; expected columns "
                            f"{', '.join(task.columns)} and {task.label} ({task.hint})")
    return texts, labels


def _text(value: object) -> str:
    """A text field: a string (a number is read as its digits; null or a list is refused)."""
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise ValueError(f"a text field holds {type(value).__name__} {str(value)[:20]!r}, "
                         "not text")
    return value if isinstance(value, str) else str(value)


def _label(value: object) -> int:
    """An integer class label: an int, a whole float, or a string of digits (else refused)."""
    if isinstance(value, bool):
        raise ValueError(f"label {value!r} is a boolean, not a class index")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"label {value!r} is not a whole number")
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        if not s.lstrip("-").isdigit():
            raise ValueError(f"label {value[:20]!r} is not an integer")
        return int(s)
    if isinstance(value, int):
        return value
    raise ValueError(f"label {str(value)[:20]!r} is a {type(value).__name__}, not an integer")


#: Longest CSV/TSV field read [characters] (Python's default is 128 KiB).
MAX_FIELD = 16 * 2**20


@contextlib.contextmanager
def _csv_errors(path: Path):
    """CSV fields up to :data:`MAX_FIELD`; a malformed file is one DataFileError."""
    before = csv.field_size_limit(MAX_FIELD)
    try:
        yield
    except csv.Error as exc:
        raise DataFileError(f"{path}: not a readable CSV/TSV file ({str(exc)[:80]}); fields "
                            f"may hold at most {MAX_FIELD // 2**20} Mi characters") from None
    finally:
        csv.field_size_limit(before)


def _read_tsv(path: Path) -> list[dict]:
    with _csv_errors(path), open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def _read_csv(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    with _csv_errors(path):
        rows = list(csv.reader(io.StringIO(text)))
        if rows and rows[0] and rows[0][0].strip().isdigit():  # headerless (AG News original)
            return rows
        return list(csv.DictReader(io.StringIO(text)))


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if line.strip():
                try:
                    row = parse_json(line, f"{path}: line {i + 1}")
                except ConfigError as exc:
                    raise DataFileError(str(exc)) from None
                if not isinstance(row, dict):
                    raise DataFileError(f"{path}: line {i + 1} is a JSON {type(row).__name__}, "
                                        "not an object with the text and label fields")
                out.append(row)
    return out


def _read_parquet(paths) -> list[dict]:
    pq = _pyarrow("parquet")
    paths = paths if isinstance(paths, list) else [paths]
    out = []
    for p in paths:
        try:
            out += pq.read_table(p).to_pylist()
        except Exception as exc:  # pyarrow raises its own error types
            raise DataFileError(f"{p}: not a readable parquet file ({exc.__class__.__name__})") from None
    return out


def _read_arrow(path: Path) -> list[dict]:
    ipc = _pyarrow("ipc")
    out = []
    for p in sorted(path.parent.glob("data-*.arrow")):
        try:
            with open(p, "rb") as fh:
                out += ipc.open_stream(fh).read_all().to_pylist()
        except Exception as exc:
            raise DataFileError(f"{p}: not a datasets arrow file ({exc.__class__.__name__})") from None
    return out


def _pyarrow(module: str):
    try:
        import importlib

        return importlib.import_module(f"pyarrow.{module}")
    except ImportError:
        raise DataNotFoundError("parquet and arrow files need pyarrow: pip install "
                                "'wirelessfl[text]'") from None


def _read_bydate(root: Path) -> Rows:
    groups = sorted(p for p in root.iterdir() if p.is_dir())
    if len(groups) != 20:
        raise DataFileError(f"{root}: holds {len(groups)} newsgroup folders, the bydate release has 20")
    texts, labels = [], []
    for label, g in enumerate(groups):
        for f in sorted(g.iterdir()):
            if f.is_file():
                texts.append((f.read_bytes().decode("latin-1"),))
                labels.append(label)
    return texts, labels
