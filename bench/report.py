"""Markdown tables of a ``python -m bench --json`` file, for BENCHMARKS.md.

python -m bench.report figures.json > tables.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.core import rate_text, seconds_text

__all__ = ["markdown"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _series_table(series: dict[str, Any]) -> list[str]:
    lines = ["| series | median | min | max | rate (of the median) |", "|---|--:|--:|--:|---|"]
    for label, s in series.items():
        rates = ", ".join(rate_text(unit, value) for unit, value in s["rates"].items())
        note = f" ({s['note']})" if s.get("note") else ""
        lines.append(
            f"| {_cell(label)} | {seconds_text(s['median_s'])} | {seconds_text(s['min_s'])} | "
            f"{seconds_text(s['max_s'])} | {rates}{note} |"
        )
    return lines


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _figures(figures: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    plain = {k: v for k, v in figures.items() if not isinstance(v, dict)}
    if plain:
        lines.append("Figures: " + ", ".join(f"{k} = {_figure(v)}" for k, v in plain.items()) + ".")
        lines.append("")
    for key, value in figures.items():
        if not isinstance(value, dict) or not value:
            continue
        if all(isinstance(v, dict) for v in value.values()):
            columns = list(next(iter(value.values())))
            lines.append(f"{key}:")
            lines.append("")
            lines.append("| link | " + " | ".join(columns) + " |")
            lines.append("|---|" + "--:|" * len(columns))
            for row, cells in value.items():
                lines.append(f"| {row} | " + " | ".join(seconds_text(cells[c]) for c in columns) + " |")
        else:
            lines.append(f"{key}: " + ", ".join(f"{k} = {_figure(v)}" for k, v in value.items()) + ".")
        lines.append("")
    return lines


def markdown(document: dict[str, Any]) -> str:
    """Every case's series, figures and targets as Markdown."""
    out: list[str] = []
    for name, case in document["cases"].items():
        out += [f"### {name}", "", case["summary"] + ".", ""]
        out += [f"- {note}" for note in case["notes"]]
        if case["notes"]:
            out.append("")
        if case["series"]:
            out += [*_series_table(case["series"]), ""]
        out += _figures(case["figures"])
        if case["targets"]:
            out += ["| target | measured | verdict | basis |", "|---|--:|---|---|"]
            out += [
                f"| {_cell(t['target'])} | {t['measured'] or '-'} | **{t['verdict']}** | {_cell(t['why'])} |"
                for t in case["targets"]
            ]
            out.append("")
        if case["error"]:
            out += [f"Error: {case['error']}", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
