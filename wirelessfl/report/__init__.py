"""Reports: regenerate a paper's figures and tables, or sweep a config, from run folders.

A figure is data (:mod:`~wirelessfl.report.spec`: ``experiments/<paper>/figures.yaml``);
its runs are trained by the local executor (:mod:`~wirelessfl.report.local`) or as Ray tasks
(:mod:`~wirelessfl.report.ray_executor`); what a figure reads off the runs' rows is in
:mod:`~wirelessfl.report.metrics`, how it is drawn in :mod:`~wirelessfl.report.renderers`
and tabulated in :mod:`~wirelessfl.report.tables`; :mod:`~wirelessfl.report.plotting` draws
run folders. The entry points are :func:`regenerate` and :func:`sweep`. A published report
carries its finished runs in one archive (:mod:`~wirelessfl.report.archive`), from which
another machine re-draws it or adds seeds to it.
"""

from wirelessfl.report.figures import execute, regenerate, render, sweep
from wirelessfl.report.metrics import (
    all_done_time,
    final_accuracy,
    mean_accuracy_time,
    mean_steps,
    session_starts,
    to_target,
    transition_accuracy,
)
from wirelessfl.report.plotting import plot_runs
from wirelessfl.report.spec import (
    Figure,
    RunSpec,
    load_figures,
    missing_runs,
    panel_grid,
    run_folder,
    series_label,
)

__all__ = ["Figure", "RunSpec", "all_done_time", "execute", "final_accuracy", "load_figures",
           "mean_accuracy_time", "mean_steps", "missing_runs", "panel_grid", "plot_runs",
           "regenerate", "render", "run_folder", "series_label", "session_starts", "sweep",
           "to_target", "transition_accuracy"]
