"""The files of a run, all in one folder: ``<name>.json``, ``<name>.md`` and two PNGs.

The report and the plots are pure functions of the JSON record, so they can be
rendered again elsewhere (``python -m megamoe.bench --plot <name>.json``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from megamoe.bench.records import validate_record, write_json
from megamoe.bench.report import render_markdown


def have_matplotlib() -> bool:
    """Whether the plots can be drawn here (the GPU machine may lack matplotlib)."""
    return importlib.util.find_spec("matplotlib") is not None


def render_outputs(record: Mapping[str, Any], out_dir: Path, plots: bool = True) -> list[Path]:
    """Write the report and (unless ``plots`` is False) the plots of a validated record."""
    validate_record(record)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = record["benchmark"]["name"]
    md = out_dir / f"{name}.md"
    md.write_text(render_markdown(record))
    paths = [md]
    if plots:
        from megamoe.bench.plots import plot_ceilings, plot_samples

        paths.append(plot_samples(record, out_dir / f"{name}_samples.png"))
        paths.append(plot_ceilings(record, out_dir / f"{name}_ceilings.png"))
    return paths


def write_outputs(record: Mapping[str, Any], out_dir: Path, plots: bool = True) -> list[Path]:
    """Validate and write the record, its report and (unless ``plots`` is False) its plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = record["benchmark"]["name"]
    json_path = write_json(record, out_dir / f"{name}.json")
    return [json_path, *render_outputs(record, out_dir, plots)]
