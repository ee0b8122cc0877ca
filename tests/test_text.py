"""Text tasks: readers of local files, GPT-2 + LoRA (trainable/frozen split), FastText."""

import csv
import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from wirelessfl.data.arrays import DataFileError, DataNotFoundError  # noqa: E402
from wirelessfl.data.text import load_text, read_split  # noqa: E402
from wirelessfl.models import build_model  # noqa: E402
from wirelessfl.run.kinds import open_run, run_job

WORDS = ["<eos>", "<unk>", "good", "bad", "great", "awful", "movie", "the", "was", "a", "plot",
         "and", "it", "really", "film", "story", "is"]
FILLER = WORDS[6:]
TINY = {"vocab_size": len(WORDS), "n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 2,
        "eos_token_id": 0}


def make_tokenizer(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>",
                            unk_token="<unk>").save_pretrained(folder)


def sentences(n, rng):
    """A separable task: label 1 sentences hold 'good'/'great', label 0 'bad'/'awful'."""
    rows = []
    for _ in range(n):
        label = int(rng.integers(2))
        words = list(rng.choice(FILLER, size=int(rng.integers(3, 8))))
        words.insert(int(rng.integers(len(words) + 1)),
                     rng.choice(["good", "great"] if label else ["bad", "awful"]))
        rows.append((" ".join(words), label))
    return rows


def write_sst2(folder, n_train=1600, n_dev=200, seed=0):
    rng = np.random.default_rng(seed)
    (folder / "SST-2").mkdir(parents=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        with open(folder / "SST-2" / f"{split}.tsv", "w") as fh:
            fh.write("sentence\tlabel\n")
            for text, label in sentences(n, rng):
                fh.write(f"{text}\t{label}\n")


@pytest.fixture
def text_dir(tmp_path):
    make_tokenizer(tmp_path / "tok")
    write_sst2(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------- readers


def test_glue_tsv_layouts(tmp_path):
    (tmp_path / "QNLI").mkdir()
    (tmp_path / "QNLI" / "train.tsv").write_text(
        "index\tquestion\tsentence\tlabel\n0\twhat is it?\tit is a film.\tentailment\n"
        "1\twho?\tnobody.\tnot_entailment\n")
    texts, labels = read_split("qnli", tmp_path, ("train",))
    assert texts == [("what is it?", "it is a film."), ("who?", "nobody.")] and labels == [0, 1]
    (tmp_path / "QQP").mkdir()
    (tmp_path / "QQP" / "dev.tsv").write_text(
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n5\t1\t2\ta?\tb?\t1\n")
    assert read_split("qqp", tmp_path, ("dev", "validation")) == ([("a?", "b?")], [1])


def test_ag_news_original_csv_joins_title_and_maps_labels(tmp_path):
    (tmp_path / "ag_news_csv").mkdir()
    with open(tmp_path / "ag_news_csv" / "train.csv", "w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows([["3", "Stocks up", "Markets, rally."],
                                                          ["1", "War", "News"]])
    texts, labels = read_split("ag_news", tmp_path, ("train",))
    assert texts == [("Stocks up Markets, rally.",), ("War News",)] and labels == [2, 0]


def test_hugging_face_csv_jsonl_parquet_and_arrow_layouts(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc
    import pyarrow.parquet

    rows = [{"sentence": "good film", "label": 1}, {"sentence": "bad plot", "label": 0}]
    layouts = {"csv": lambda d: (d / "train.csv").write_text("sentence,label\ngood film,1\nbad plot,0\n"),
               "jsonl": lambda d: (d / "train.jsonl").write_text("\n".join(map(json.dumps, rows))),
               "parquet": lambda d: pyarrow.parquet.write_table(
                   pa.Table.from_pylist(rows), d / "train-00000-of-00001.parquet"),
               "arrow": lambda d: _arrow(d / "train", pa.Table.from_pylist(rows))}
    for name, write in layouts.items():
        d = tmp_path / name / "sst2"
        d.mkdir(parents=True)
        write(d)
        assert read_split("sst2", tmp_path / name, ("train",)) == (
            [("good film",), ("bad plot",)], [1, 0]), name


def _arrow(folder, table):
    import pyarrow.ipc

    folder.mkdir()
    with open(folder / "data-00000-of-00001.arrow", "wb") as fh:
        with pyarrow.ipc.new_stream(fh, table.schema) as w:
            w.write_table(table)


def test_20newsgroups_bydate_folders(tmp_path):
    for split in ("train", "test"):
        for g in range(20):
            d = tmp_path / f"20news-bydate-{split}" / f"group{g:02d}"
            d.mkdir(parents=True)
            (d / "1").write_bytes(f"From: x\n\nmessage {g} caf\xe9".encode("latin-1"))
    texts, labels = read_split("20newsgroups", tmp_path, ("test",))
    assert len(texts) == 20 and labels == list(range(20)) and texts[3][0].endswith("café")


def test_malformed_files_are_one_line_errors(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("text\tgold\nfine\t1\n")
    with pytest.raises(DataFileError, match="row 1 is malformed") as err:
        read_split("sst2", tmp_path, ("train",))
    assert "\n" not in str(err.value)
    (tmp_path / "SST-2" / "train.tsv").write_text("sentence\tlabel\nfine\tpositive\n")
    with pytest.raises(DataFileError, match="malformed"):
        read_split("sst2", tmp_path, ("train",))
    (tmp_path / "sst2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").unlink()
    (tmp_path / "sst2" / "train.jsonl").write_text('{"sentence": "a", "label": 1}\n{oops\n')
    with pytest.raises(DataFileError, match="line 2: not valid JSON"):
        read_split("sst2", tmp_path, ("train",))


def test_missing_data_names_the_files(tmp_path):
    with pytest.raises(DataNotFoundError, match="train.tsv, dev.tsv"):
        read_split("sst2", tmp_path, ("train",))
    with pytest.raises(DataNotFoundError, match="train.csv, test.csv"):
        read_split("ag_news", tmp_path, ("train",))
    with pytest.raises(DataNotFoundError, match="--data-dir"):
        load_text("qqp", None, "tok", 16)
    with pytest.raises(DataNotFoundError, match="tokenizer folder"):
        load_text("sst2", tmp_path, "no_such_tokenizer", 16)


def test_tokenised_with_padding_marked(text_dir):
    splits = load_text("sst2", text_dir, "tok", 12)
    assert splits.train.x.shape == (1600, 12) and splits.test.x.shape == (200, 12)
    x = splits.train.x
    assert (x[:, 0] >= 0).all() and (x == -1).any() and splits.train.num_classes == 2


# --------------------------------------------------------------------------- models


def test_lora_trainable_count_is_the_formula_and_the_base_is_frozen():
    m = build_model("gpt2_lora", (16,), 3, seed=0, config=TINY, r=4)
    params = m.params()
    lora = 2 * 4 * ((32 + 96) + (32 + 32) + (32 + 128) + (128 + 32))  # 2 blocks
    head = 32 * 3
    assert sum(v.numel() for v in params.values()) == lora + head == m.lora_parameter_count()
    from wirelessfl.engine.executors import make_executor
    assert type(make_executor("auto", torch.device("cpu"), model=m)).__name__ == "LoopExecutor"
    assert all("lora_" in k or "score" in k for k in params)
    frozen = [p for n, p in m.named_parameters() if not p.requires_grad]
    assert frozen and sum(p.numel() for p in frozen) > 5 * (lora + head)


def test_gpt2_small_lora_ratio_is_190_percent():
    """The real architecture from its config: 2,359,296 adapter weights, 1.90 % (§4.2)."""
    m = build_model("gpt2_lora", (16,), 2, seed=0,
                    config={"vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
                            "n_layer": 12, "n_head": 12, "eos_token_id": 50256})
    trainable = sum(v.numel() for v in m.params().values())
    base = sum(p.numel() for n, p in m.named_parameters() if not p.requires_grad)
    assert trainable - 768 * 2 == 2_359_296
    assert round(100 * (trainable - 1536) / base, 2) == 1.90


def _text_run(text_dir, algorithm, rounds=4, **over):
    raw = {"seed": 0, "rounds": rounds,
           "data": {"dataset": "sst2", "data_dir": str(text_dir), "tokenizer": "tok",
                    "max_length": 12, "partition": "dirichlet_over_clients", "num_clients": 4,
                    "alpha": 1.0, "min_size": 10},
           "model": {"name": "gpt2_lora", "options": {"config": TINY, "r": 4, "lora_dropout": 0.0}},
           "local": {"lr": 0.003, "batch_size": 32, "epochs": 1, "optimizer": "adam"},
           "algorithm": algorithm, **over}
    return open_run(raw).exp


def test_frozen_weights_never_change_nor_enter_deltas_y_or_v(text_dir):
    exp = _text_run(text_dir, {"name": "fadamgc", "clients_per_round": 4, "server_lr": 1.0})
    before = {n: p.detach().clone() for n, p in exp.model.named_parameters() if not p.requires_grad}
    state = exp.initial_state()
    trainable = set(state.params)
    for _ in range(2):
        state, _ = exp.algorithm.apply(state)
    after = {n: p for n, p in exp.model.named_parameters() if not p.requires_grad}
    assert all(torch.equal(before[n], after[n]) for n in before)
    for cs in state.client_states.values():
        for tree in (cs.values() if isinstance(cs, dict) and not all(
                isinstance(v, torch.Tensor) for v in cs.values()) else [cs]):
            if isinstance(tree, dict):
                assert set(tree) <= trainable
    assert set(state.params) == trainable


def test_tiny_gpt2_lora_learns_a_separable_task_with_fadamgc(text_dir):
    from wirelessfl.engine.client import evaluate

    exp = _text_run(text_dir, {"name": "fadamgc", "clients_per_round": 4, "server_lr": 1.0},
                    rounds=8)
    state = exp.initial_state()
    for _ in range(8):
        state, _ = exp.algorithm.apply(state)
    acc = evaluate(exp.model, state.params, exp.splits.test)[0]
    assert acc > 0.9  # chance is 0.5; 8 one-epoch rounds of 4 clients (0.97 measured)


def test_lora_loop_equals_batched(text_dir):
    """Without dropout (GPT-2's draws come from torch's generator, not the client streams).

    ``engine: auto`` picks the loop for GPT-2 on a CPU; the batched engine must agree."""
    still = {"config": {**TINY, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
             "r": 4, "lora_dropout": 0.0}
    a = _text_run(text_dir, {"name": "fedavg"}, engine="loop",
                  model={"name": "gpt2_lora", "options": still})
    b = _text_run(text_dir, {"name": "fedavg"}, engine="batched",
                  model={"name": "gpt2_lora", "options": still})
    sa, _ = a.algorithm.apply(a.initial_state())
    sb, _ = b.algorithm.apply(b.initial_state())
    for k in sa.params:  # float rounding only: Adam's 1/√v scales it up on tiny entries
        torch.testing.assert_close(sa.params[k], sb.params[k], rtol=1e-3, atol=1e-4)


def test_fasttext_mean_pools_non_pad_tokens():
    m = build_model("fasttext", (6,), 4, seed=0, vocab=20, dim=8)
    x = torch.tensor([[3.0, 5.0, -1.0, -1.0, -1.0, -1.0], [3.0, 5.0, 7.0, -1.0, -1.0, -1.0]])
    _, z = m(x, features=True)
    e = m.embed.weight
    torch.testing.assert_close(z[0], (e[3] + e[5]) / 2)
    torch.testing.assert_close(z[1], (e[3] + e[5] + e[7]) / 3)


# --------------------------------------------------------------------------- experiments


def test_fadamgc_table2_text_smoke_run_on_a_hand_made_folder(text_dir):
    """Table 2's SST-2 FAdamGC run (paper scale: n = 100, S = 10, one epoch, Table 5's rates)
    on a GPT-2 built from a small config and a hand-made SST-2 folder, shortened to 1 round."""
    from wirelessfl.report import load_figures
    from wirelessfl.run.config import apply_overrides
    from wirelessfl.run.records import RunRecord
    from wirelessfl.run.rounds import RoundsJob

    (fig,) = load_figures("fadamgc", "paper", only=["table2_text"])
    spec = next(r for r in fig.runs if (r.panel, r.series, r.seed) == ("SST-2", "FAdamGC", 0))
    assert spec.raw["algorithm"]["server_lr"] == 0.3 and spec.raw["local"]["lr"] == 0.001
    assert spec.raw["local"]["epochs"] == 1 and spec.raw["data"]["max_length"] == 128
    raw = apply_overrides(spec.raw, [f"data.data_dir={text_dir}", "data.tokenizer=tok",
                                     f"model.options={json.dumps({'config': TINY, 'r': 4})}",
                                     "data.max_length=12", "rounds=1", "data.num_clients=10",
                                     "data.alpha=1.0", "data.min_size=2",
                                     "data.samples_per_client=100"])  # the folder's 1,600
    assert raw["data"]["partition"] == "dirichlet_per_client"  # two classes: per client mix
    exp = open_run(raw).exp
    run_job(RoundsJob(exp), text_dir / "run", quiet=True)
    rows = RunRecord(text_dir / "run").rows()
    assert [r["round"] for r in rows] == [0, 1] and rows[-1]["sim_time_s"] > 0
    d = sum(v.numel() for v in exp.initial_state().params.values())
    assert rows[-1]["uplink_mb_per_client"] < 1e-3 * d   # LoRA + head only, not the base


def test_dynamic_table2_ag_news_smoke_run(tmp_path):
    """Table 2 (AG News, FastText on a BERT tokenizer folder), shortened to 2 sessions of 2 rounds."""
    from wirelessfl.report import load_figures
    from wirelessfl.run.config import apply_overrides
    from wirelessfl.run.records import RunRecord

    bert = tmp_path / "bert-base-uncased"
    bert.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "stocks", "game", "war", "chip",
             "rise", "team", "peace", "phone"]
    (bert / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (bert / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                            "do_lower_case": True}))
    rng = np.random.default_rng(0)
    words = {1: ["war", "peace"], 2: ["game", "team"], 3: ["stocks", "rise"], 4: ["chip", "phone"]}
    (tmp_path / "ag_news_csv").mkdir()
    for split, n in (("train", 800), ("test", 200)):
        with open(tmp_path / "ag_news_csv" / f"{split}.csv", "w", newline="") as fh:
            w = csv.writer(fh, quoting=csv.QUOTE_ALL)
            for _ in range(n):
                c = int(rng.integers(1, 5))
                w.writerow([str(c), " ".join(rng.choice(words[c], 2)), "Some news."])
    (fig,) = load_figures("dynamic", "paper", only=["table2"])
    spec = next(r for r in fig.runs if r.panel == "AG News o=0.0 α=0.3 FedAvg"
                and r.series == "Proposed" and r.seed == 0)
    assert spec.raw["initial_model"]["scale"] == 800.0 and spec.raw["data"]["max_length"] == 64
    raw = apply_overrides(spec.raw, [f"data.data_dir={tmp_path}", "rounds=6",
                                     "population.rounds_per_session=2", "local.schedule_rounds=2",
                                     "model.options={vocab: 13}"])
    run_job(open_run(raw), tmp_path / "run", quiet=True)
    rows = RunRecord(tmp_path / "run").rows()
    assert rows[-1]["round"] == 6 and {r["session"] for r in rows if r["round"]} == {0, 1, 2}


@pytest.mark.parametrize("lines, match", [
    (['["a b", 1]', '["c d", 0]'], "JSON list, not an object"),
    (['{"sentence": "a b", "label": 1.5}'], "not a whole number"),
    (['{"sentence": null, "label": 1}'], "not text"),
    (['{"sentence": "a b", "label": true}'], "boolean"),
    (['[' * 5000 + ']' * 5000], "nested more than"),
])
def test_text_rows_of_the_wrong_type_are_refused_not_misread(tmp_path, lines, match):
    folder = tmp_path / "sst2"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFileError, match=match) as err:
        read_split("sst2", tmp_path, ("train",))
    assert "\n" not in str(err.value)


def test_a_huge_tsv_field_is_read_or_refused_in_one_line(tmp_path):
    from wirelessfl.data.text import _read_tsv

    path = tmp_path / "t.tsv"
    path.write_text("sentence\tlabel\n" + "a" * 200_000 + "\t1\n")
    assert len(_read_tsv(path)[0]["sentence"]) == 200_000


def test_lora_batched_round_stacks_only_the_adapters_and_shares_one_base(text_dir, monkeypatch):
    """The batched engine stacks the adapters and the head per client; the frozen GPT-2 base
    is one copy (the module's own storage) read by every client, never stacked or moved."""
    from wirelessfl.engine import batched

    stacked = []
    real = batched._stack_starts

    def spy(batch, key, device, column=False):
        out = real(batch, key, device, column)
        stacked.append((out.shape[0], tuple(out.shape[1:])))
        return out

    monkeypatch.setattr(batched, "_stack_starts", spy)
    exp = _text_run(text_dir, {"name": "fedavg", "clients_per_round": 4}, engine="batched")
    base = {n: (p.data_ptr(), p.detach().clone()) for n, p in exp.model.named_parameters()
            if not p.requires_grad}
    state = exp.initial_state()
    state, _ = exp.algorithm.apply(state)
    trainable = {tuple(v.shape) for v in state.params.values()}
    assert stacked and all(shape in trainable and n == 4 for n, shape in stacked)
    stacked_numel = sum(n * int(np.prod(s)) for n, s in stacked)
    assert stacked_numel <= 4 * 3 * sum(v.numel() for v in state.params.values())  # params, ctx
    base_numel = sum(v.numel() for _, v in base.values())
    assert stacked_numel < base_numel  # the base (most of the model) is not among them
    for n, p in exp.model.named_parameters():
        if n in base:
            assert p.data_ptr() == base[n][0] and torch.equal(p, base[n][1]) and p.grad is None
