import pytest

from wirelessfl.run.config import ConfigError, apply_overrides, list_presets, load_raw, resolve, to_dict
from wirelessfl.run.multitask import is_multitask, multitask_to_dict, resolve_multitask


def test_roundtrip_of_every_preset():
    presets = list_presets()
    assert "quickstart" in presets and "e4_fmnist_quick" in presets
    for name in presets:
        raw = load_raw(name)
        if is_multitask(raw):
            cfg = resolve_multitask(raw)
            assert resolve_multitask(multitask_to_dict(cfg)) == cfg
        else:
            cfg = resolve(load_raw(name))
            assert resolve(to_dict(cfg)) == cfg


def test_overrides_are_typed():
    raw = apply_overrides({}, ["local.lr=0.2", "algorithm.name=hfedavg", "algorithm.cells=4",
                               "model.options={hidden: 7}", "local.betas=[0.8, 0.9]"])
    cfg = resolve(raw)
    assert cfg.local.lr == 0.2 and cfg.algorithm.hparams.cells == 4
    assert cfg.model.options == {"hidden": 7} and cfg.local.betas == (0.8, 0.9)


@pytest.mark.parametrize("raw,match", [
    ({"rounds": "ten"}, "rounds must be an integer"),
    ({"local": {"lr": -1}}, "local.lr must be > 0"),
    ({"algorithm": {"name": "fedsgd"}}, "unknown algorithm 'fedsgd'"),
    ({"algorithm": {"name": "hfedavg", "clients_per_round": 3}},
     "unknown config key 'algorithm.clients_per_round'"),
    ({"data": {"partition": "pathological"}}, "data.partition must be one of"),
    ({"epochs": 3}, "unknown config key 'epochs'"),
    ({"local": {"betas": [0.9]}}, "must have 2 entries"),
])
def test_bad_configs_name_the_key(raw, match):
    with pytest.raises(ConfigError, match=match):
        resolve(raw)


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["local.lr"])


def test_stored_config_equals_the_resolved_one_for_every_algorithm():
    """What run folders store (YAML) compares equal to to_dict, so --resume accepts it."""
    import yaml

    from wirelessfl import registry

    for name in registry.names("rounds"):
        d = to_dict(resolve({"algorithm": {"name": name}}))
        assert yaml.safe_load(yaml.safe_dump(d)) == d


def test_nested_algorithm_sections_are_typed_and_validated():
    import dataclasses

    from wirelessfl.run.configtypes import AlgorithmConfig, _plain, build_dataclass

    @dataclasses.dataclass(frozen=True)
    class Wrapper:
        inner: AlgorithmConfig = dataclasses.field(
            default_factory=lambda: AlgorithmConfig("fedavg", None))
        sessions: int = 3

    w = build_dataclass(Wrapper, {"inner": {"name": "fedprox", "mu": 0.5}}, "algorithm")
    assert w.inner.name == "fedprox" and w.inner.hparams.mu == 0.5
    assert _plain(w)["inner"]["mu"] == 0.5 and _plain(w)["inner"]["name"] == "fedprox"
    with pytest.raises(ConfigError, match="algorithm.inner.mu"):
        build_dataclass(Wrapper, {"inner": {"name": "fedprox", "mu": -1}}, "algorithm")
    with pytest.raises(ConfigError, match="unknown algorithm 'nope' in 'algorithm.inner'"):
        build_dataclass(Wrapper, {"inner": {"name": "nope"}}, "algorithm")
    with pytest.raises(ConfigError, match="unknown algorithm 'fedast'"):  # wrong kind
        build_dataclass(Wrapper, {"inner": {"name": "fedast"}}, "algorithm")


def test_yaml_booleans_read_as_on_off_where_documented_and_say_what_to_write_elsewhere():
    """``--set replay=off`` (YAML reads off as false) is replay off, as the docs say;
    compile off likewise; a string setting given a boolean says to quote the word."""
    from wirelessfl.run.config import ConfigError, apply_overrides, resolve

    base = {"data": {"dataset": "synthetic", "num_clients": 4}}
    assert resolve(apply_overrides(base, ["replay=off"])).replay == "off"
    assert resolve(apply_overrides(base, ["replay=on"])).replay == "on"
    assert resolve(apply_overrides(base, ["compile=off"])).compile == "off"
    with pytest.raises(ConfigError, match="names no mode"):
        resolve(apply_overrides(base, ["compile=on"]))
    with pytest.raises(ConfigError, match="quote the word"):
        resolve(apply_overrides(base, ["engine=off"]))


def test_keys_that_python_merges_are_named_exactly():
    """{1: a, true: b} are two YAML keys but one Python key: the message names both."""
    from wirelessfl.errors import ConfigError, parse_yaml

    with pytest.raises(ConfigError, match=r"keys 1 and True \(line 1\) are one key once read"):
        parse_yaml("{1: a, true: b}", "x.yaml")
    with pytest.raises(ConfigError, match="key 'a' is given twice"):
        parse_yaml("a: 1\na: 2\n", "x.yaml")


def test_retime_of_rows_without_accuracy_is_one_line(tmp_path, capsys):
    import json

    from wirelessfl.cli import main
    from wirelessfl.run.kinds import open_run, run_job

    raw = {"seed": 1, "rounds": 1, "data": {"dataset": "synthetic", "num_clients": 4},
           "model": {"name": "fcnn", "options": {"hidden": 4}}, "algorithm": {"name": "fedavg"}}
    run_job(open_run(raw), tmp_path / "r", quiet=True)
    rows = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    bare = [json.dumps({k: v for k, v in json.loads(r).items() if k != "test_accuracy"}) for r in rows]
    (tmp_path / "r" / "metrics.jsonl").write_text("\n".join(bare) + "\n")
    assert main(["retime", str(tmp_path / "r"), "--set", "network.model=tdma"]) == 2
    err = capsys.readouterr().err
    assert "lacks its round or test_accuracy" in err and "Traceback" not in err


def test_a_multi_task_configs_data_dir_reaches_every_task(tmp_path):
    """``--set data.data_dir=D`` and ``figures --data-dir D`` on a multi-task config (FedAST)
    read every task's data from D (they failed with "unknown config key 'data'"); a task's
    own setting wins; only where data is read from and placed may be shared."""
    from wirelessfl.cli import main

    raw = apply_overrides(load_raw("centralized_fmnist_quick"), [f"data.data_dir={tmp_path}"])
    raw["tasks"] = [raw["tasks"][0], {"task": "fmnist_lenet5", "data": {"data_dir": "own"}}]
    cfg = resolve_multitask(raw)
    assert [t.data.data_dir for t in cfg.tasks] == [str(tmp_path), "own"] * 2  # copies: 2
    assert resolve_multitask(multitask_to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="sets only data_dir, placement"):
        resolve_multitask(apply_overrides(load_raw("centralized_fmnist_quick"), ["data.seed=3"]))
    assert main(["figures", "fedast", "--scale", "quick", "--only", "e1", "--dry-run", "--quiet",
                 "--data-dir", str(tmp_path), "--out", str(tmp_path / "r")]) == 0


@pytest.mark.parametrize("setting", [{"replay": "on"}, {"low_rank": "on"}, {"max_batch": 4}])
def test_a_batched_engine_setting_with_the_loop_engine_is_refused_not_ignored(setting):
    with pytest.raises(ConfigError, match="the loop engine trains one client at a time"):
        resolve({"engine": "loop", **setting})
    resolve({"engine": "batched", **setting})  # where it acts
    resolve({"engine": "loop", "replay": "off", "low_rank": "off"})  # saying "off" is fine


def test_a_repeated_override_gives_the_same_value_and_never_a_shared_list():
    """Scalar overrides are parsed once and remembered (immutable); a list or mapping is
    parsed afresh each time, so changing one config's list leaves the next one's alone."""
    first = apply_overrides({}, ["data.alpha=0.1", "local.betas=[0.9, 0.99]", "x=.nan"])
    first["local"]["betas"].append(7)
    second = apply_overrides({}, ["data.alpha=0.1", "local.betas=[0.9, 0.99]", "x=.nan"])
    assert second["data"]["alpha"] == 0.1 and type(second["data"]["alpha"]) is float
    assert second["local"]["betas"] == [0.9, 0.99]
    assert second["x"] != second["x"]  # NaN, remembered as such
    assert apply_overrides({}, ["seed=3"])["seed"] == 3 and apply_overrides({}, ["s='3'"])["s"] == "3"
