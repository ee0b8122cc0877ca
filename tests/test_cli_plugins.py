"""A researcher's own code from the command line: --plugin, entry points, resume, workers."""

import json
import textwrap

import pytest

from wirelessfl import registry
from wirelessfl.cli import main
from wirelessfl.run import plugins

PLUGIN = textwrap.dedent('''
    import wirelessfl
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams


    class {cls}(FedAvg):
        """A user's FedAvg."""


    wirelessfl.register_algorithm("{name}", FedAvgHParams, {cls})
''')
CONFIG = textwrap.dedent('''
    rounds: 2
    data: {{dataset: synthetic, num_clients: 4, samples_per_client: 20}}
    model: {{name: linear}}
    algorithm: {{name: {name}}}
''')


@pytest.fixture
def box(tmp_path, monkeypatch):
    """A folder with a plug-in file and a config naming its algorithm; all undone after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.setattr(plugins, "_LOADED", [])
    monkeypatch.setattr(plugins, "_ENTRY", [])
    (tmp_path / "clipavg.py").write_text(PLUGIN.format(cls="ClipAvg", name="clipavg"))
    (tmp_path / "cfg.yaml").write_text(CONFIG.format(name="clipavg"))
    yield tmp_path
    for name in ("clipavg", "modavg"):
        if name in registry.names():
            registry.unregister(name)


def test_a_plugin_file_runs_resumes_and_is_recorded(box, capsys):
    assert main(["run", "cfg.yaml", "--out", "a", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown algorithm 'clipavg'" in err and "--plugin" in err
    assert main(["run", "cfg.yaml", "--out", "r", "--quiet", "--plugin", "clipavg.py"]) == 0
    meta = json.loads((box / "r" / "meta.json").read_text())
    assert meta["plugins"] == [str((box / "clipavg.py").resolve())]
    registry.unregister("clipavg")
    plugins._LOADED.clear()   # a new command: nothing loaded
    capsys.readouterr()
    assert main(["run", "--resume", "--out", "r", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--plugin {box / 'clipavg.py'}" in err
    assert main(["run", "--resume", "--out", "r", "--quiet", "--plugin",
                 str(box / "clipavg.py")]) == 0



def test_a_run_whose_plugin_file_moved_resumes_with_the_file_s_new_path(box, capsys):
    """Issue 71: the recorded path is gone; --plugin with the same file name elsewhere
    resumes the run (before: only by editing meta.json). A file still at the recorded path
    must be the one loaded."""
    assert main(["run", "cfg.yaml", "--out", "r", "--quiet", "--plugin", "clipavg.py"]) == 0
    (box / "moved").mkdir()
    (box / "clipavg.py").rename(box / "moved" / "clipavg.py")
    registry.unregister("clipavg")
    plugins._LOADED.clear()
    capsys.readouterr()
    assert main(["run", "--resume", "--out", "r", "--quiet"]) == 2  # none given: says it moved
    err = capsys.readouterr().err
    assert "--plugin NEW/PATH/clipavg.py" in err and "no longer there" in err, err
    assert main(["run", "--resume", "--out", "r", "--quiet", "--plugin",
                 "moved/clipavg.py"]) == 0
    (box / "clipavg.py").write_text(PLUGIN.format(cls="ClipAvg", name="clipavg"))  # back
    registry.unregister("clipavg")
    plugins._LOADED.clear()
    capsys.readouterr()
    assert main(["run", "--resume", "--out", "r", "--quiet", "--plugin",
                 "moved/clipavg.py"]) == 2
    assert "made with plug-in" in capsys.readouterr().err


def test_a_plugin_module_from_the_python_path(box, monkeypatch):
    (box / "wfl_test_modavg.py").write_text(PLUGIN.format(cls="ModAvg", name="modavg"))
    (box / "mod.yaml").write_text(CONFIG.format(name="modavg"))
    monkeypatch.syspath_prepend(str(box))
    assert main(["run", "mod.yaml", "--out", "m", "--quiet", "--plugin", "wfl_test_modavg"]) == 0
    assert json.loads((box / "m" / "meta.json").read_text())["plugins"] == ["wfl_test_modavg"]


@pytest.mark.parametrize("spec, match", [
    ("missing.py", "no such .py file"),
    ("no_such_module_xyz", "no module of that name"),
    ("not a name", "not a module name"),
    ("broken.py", "failed while importing: ZeroDivisionError"),
    ("leaves.py", "called sys.exit(0) while importing"),
])
def test_a_bad_plugin_is_one_line(box, capsys, spec, match):
    (box / "broken.py").write_text("x = 1 / 0\n")
    (box / "leaves.py").write_text("import sys\nsys.exit(0)\n")  # used to end the command, 0
    assert main(["run", "cfg.yaml", "--out", "b", "--quiet", "--plugin", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err
    assert not (box / "b").exists()


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_sweep_with_two_jobs_loads_the_plugin_in_its_worker_processes(box):
    assert main(["sweep", "cfg.yaml", "--grid", "local.lr=0.05,0.1", "--out", "sw", "--quiet",
                 "--jobs", "2", "--plugin", "clipavg.py"]) == 0
    summaries = list((box / "sw").rglob("summary.json"))
    assert len(summaries) == 2


def test_an_installed_plugin_registers_itself_through_its_entry_point(box, monkeypatch):
    """An installed package's entry point (group wirelessfl.plugins) loads with every command."""
    import importlib.metadata

    calls = []

    class EntryPoint:
        name, value = "clip", "clipavg_pkg:register"

        def load(self):
            def register():
                calls.append(1)
                plugins.load_plugins([str(box / "clipavg.py")])
            return register

    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [EntryPoint()] if group == plugins.ENTRY_GROUP else [])
    assert main(["run", "cfg.yaml", "--out", "e", "--quiet"]) == 0 and calls == [1]


def test_a_config_file_never_imports_code(box, capsys):
    """Naming a module in a config does not import it: only --plugin or an installation does."""
    (box / "evil.py").write_text("open('PWNED', 'w').close()\n")
    (box / "evil.yaml").write_text(CONFIG.format(name="evil"))
    assert main(["run", "evil.yaml", "--out", "x", "--quiet"]) == 2
    assert not (box / "PWNED").exists()


def _installed(site, name="entryavg"):
    """A package installed in ``site`` whose entry point registers algorithm ``name``."""
    module = PLUGIN.format(cls="EntryAvg", name=name)
    module = module.replace("\nwirelessfl.register_algorithm", "\ndef register():\n    "
                            "wirelessfl.register_algorithm")  # registers when called
    (site / f"{name}_pkg.py").write_text(module)
    info = site / f"{name}_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_GROUP}]\n{name} = {name}_pkg:register\n")


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_an_installed_plugin_is_loaded_in_every_worker_process(box, monkeypatch):
    """A sweep with --jobs 2 of an entry-point plug-in's algorithm, no --plugin: each spawned
    worker loads the installed packages' plug-ins as the command did (a real dist-info)."""
    site = box / "site"
    site.mkdir()
    _installed(site)
    monkeypatch.syspath_prepend(str(site))  # spawned workers get the parent's sys.path
    (box / "e.yaml").write_text(CONFIG.format(name="entryavg"))
    try:
        assert main(["sweep", "e.yaml", "--grid", "local.lr=0.05,0.1", "--out", "se", "--quiet",
                     "--jobs", "2"]) == 0
    finally:
        if "entryavg" in registry.names():
            registry.unregister("entryavg")
    assert len(list((box / "se").rglob("summary.json"))) == 2


def test_a_plugin_variable_left_in_the_environment_is_not_loaded_by_workers(box, monkeypatch):
    """WIRELESSFL_PLUGINS is how a command hands its plug-ins to its workers: one left in the
    shell is not loaded by them (nor by the command), so the workers do what the command does."""
    (box / "boom.py").write_text("raise RuntimeError('loaded behind the command')\n")
    monkeypatch.setenv(plugins.ENV, str(box / "boom.py"))
    (box / "f.yaml").write_text(CONFIG.format(name="fedavg"))
    assert main(["sweep", "f.yaml", "--grid", "local.lr=0.05,0.1", "--out", "sf", "--quiet",
                 "--jobs", "2"]) == 0
    assert len(list((box / "sf").rglob("summary.json"))) == 2


def test_meta_records_entry_points_and_a_file_run_resumes_once_installed(box, monkeypatch,
                                                                          capsys):
    """A run records the installed plug-ins it loaded (entry point, package, version). A run
    made with ``--plugin clipavg.py`` resumes after the same plug-in is installed as a
    package: without --plugin (one line says what provides its names), and --plugin beside
    the installed one is one line saying to drop it."""
    assert main(["run", "cfg.yaml", "--out", "r", "--quiet", "--plugin", "clipavg.py"]) == 0
    registry.unregister("clipavg")
    plugins._LOADED.clear()  # a new command, and now the package is installed
    site = box / "site"
    site.mkdir()
    _installed(site, name="clipavg")
    monkeypatch.syspath_prepend(str(site))
    import importlib

    importlib.invalidate_caches()
    capsys.readouterr()
    try:
        assert main(["run", "--resume", "--out", "r", "--quiet", "--plugin", "clipavg.py"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "drop --plugin" in err and "clipavg-pkg 0.1" in err
        assert main(["run", "--resume", "--out", "r", "--quiet"]) == 0
        err = capsys.readouterr().err
        assert "resolve through the installed plug-in(s) clipavg (clipavg-pkg 0.1)" in err
        assert main(["run", "cfg.yaml", "--out", "n", "--quiet"]) == 0
    finally:
        if "clipavg" in registry.names():
            registry.unregister("clipavg")
    meta = json.loads((box / "n" / "meta.json").read_text())
    assert meta["entry_points"] == [{"entry_point": "clipavg", "value": "clipavg_pkg:register",
                                     "package": "clipavg-pkg", "version": "0.1"}]
    assert "plugins" not in meta


MODEL_PLUGIN = textwrap.dedent('''
    from torch import nn

    import wirelessfl
    from wirelessfl.models import FLModel


    class TinyNet(FLModel):
        """A user's own model."""

        def __init__(self, sample_shape, num_classes, width=8):
            super().__init__()
            n = 1
            for s in sample_shape:
                n *= s
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(n, width), nn.ReLU(),
                                      nn.Linear(width, num_classes))

        def forward(self, x):
            return self.body(x)


    wirelessfl.register_model("tinynet_plugin", TinyNet)
''')


def test_a_plugin_model_trains_on_the_distributed_engine_s_worker_ranks(box):
    """The worker ranks of ``engine: distributed`` load the command's plug-ins before the
    first round: a plug-in file's model (its class unpickled in each rank) trains there."""
    from wirelessfl.models import MODELS

    (box / "tiny.py").write_text(MODEL_PLUGIN)
    (box / "d.yaml").write_text(CONFIG.format(name="fedavg").replace("{name: linear}",
                                                                    "{name: tinynet_plugin}"))
    try:
        assert main(["run", "d.yaml", "--out", "d", "--quiet", "--engine", "distributed",
                     "--workers", "2", "--plugin", "tiny.py"]) == 0
    finally:
        MODELS.pop("tinynet_plugin", None)
    assert json.loads((box / "d" / "summary.json").read_text())["rounds"] == 2
