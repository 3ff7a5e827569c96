"""Reading the monitoring files of ``deploy/`` (Prometheus rules, the Grafana dashboard) in tests: their
PromQL expressions, the metric names each expression selects, and the names a ``/metrics`` scrape exports.

The metric names are read from an expression by removing what cannot be one (strings, label matchers,
ranges, grouping clauses, Grafana's ``$variables``) and keeping the identifiers that are not functions or
keywords. That is enough for the expressions of these files (tests/test_monitoring.py checks the reader on
known expressions, and ``promtool check rules`` checks that each expression parses).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "DASHBOARD",
    "RULES",
    "RULE_TESTS",
    "Expression",
    "as_recording_rules",
    "dashboard_expressions",
    "exported_names",
    "firing_alerts_test",
    "load_dashboard",
    "load_rules",
    "metric_names",
    "rule_expressions",
]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "xla-cache-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "xla-cache-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "xla-cache-dashboard.json"

# The names a sample of each metric type can have, after the family's name (prometheus-client's parser
# names a counter's family without its "_total").
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:$])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
        "start",
        "end",
    }
)
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?)\s*,\s*\w+\s*\)\s*$", re.DOTALL)
# Grafana's variables, as the concrete values a query is sent with (for promtool to parse the expression).
_GRAFANA_VALUES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h", "__range_s": "3600"}


@dataclass(frozen=True)
class Expression:
    """One PromQL expression of a monitoring file, and where it is (an alert's name, a panel's title)."""

    where: str
    promql: str


def metric_names(promql: str) -> set[str]:
    """The metric names ``promql`` selects (a Grafana ``label_values(metric, label)`` query: its metric)."""
    found = _LABEL_VALUES.match(promql)
    text = found.group(1) if found else promql
    text = _STRING.sub('""', text)
    text = _GRAFANA_VARIABLE.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call is None and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def exported_names(scrape: str) -> set[str]:
    """Every metric name a PromQL expression can select from a server that answers ``/metrics`` with
    ``scrape``: each family's sample names by its type, declared ones with no sample yet included."""
    names: set[str] = set()
    for family in text_string_to_metric_families(scrape):
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def load_rules() -> dict[str, Any]:
    """The rules file as YAML data."""
    data: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return data


def rule_expressions() -> list[Expression]:
    """Every rule's expression, by its alert (or recording) name."""
    return [
        Expression(rule.get("alert") or rule["record"], rule["expr"])
        for group in load_rules()["groups"]
        for rule in group["rules"]
    ]


def load_dashboard() -> dict[str, Any]:
    """The Grafana dashboard as JSON data."""
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def dashboard_expressions() -> list[Expression]:
    """Every PromQL expression of the dashboard: each panel's queries, and each query variable's."""
    dashboard = load_dashboard()
    found = [
        Expression(f"panel {panel['title']!r} {target['refId']}", target["expr"])
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append(Expression(f"variable ${variable['name']}", query["query"]))
    return found


def as_recording_rules(expressions: list[Expression]) -> str:
    """A rules file (YAML) with one recording rule per expression, Grafana's variables given values, for
    ``promtool check rules`` to parse each one (a ``label_values`` query: its metric selector)."""

    def concrete(promql: str) -> str:
        found = _LABEL_VALUES.match(promql)
        text = found.group(1) if found else promql
        return _GRAFANA_VARIABLE.sub(lambda m: _GRAFANA_VALUES.get(m.group(0).strip("${}"), "x"), text)

    rules = [
        {"record": f"dashboard:expression_{number}", "expr": concrete(expression.promql)}
        for number, expression in enumerate(expressions)
    ]
    return yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False)


def _series_name(name: str, labels: dict[str, str]) -> str:
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"') for value in labels.values())
    pairs = ", ".join(f'{label}="{value}"' for label, value in zip(labels, escaped, strict=True))
    return f"{name}{{{pairs}}}"


def firing_alerts_test(scrape: str, firing: list[dict[str, str]], *, minutes: int = 60) -> str:
    """A ``promtool test rules`` file (YAML) over :data:`RULES`: the ``xla_cache_*`` series of ``scrape``
    as if its traffic came again every minute for ``minutes`` (counters grow by their value each minute,
    gauges stay), scraped as job ``xla-cache``; at the end exactly the alerts ``firing`` (each its
    ``alertname`` and the labels it is told apart by) fire."""
    series = []
    for family in text_string_to_metric_families(scrape):
        grows = family.type in ("counter", "histogram", "summary")
        for sample in family.samples:
            if not sample.name.startswith("xla_cache_") or sample.name.endswith("_created"):
                continue
            labels = {**sample.labels, "job": "xla-cache", "instance": "server"}
            value = f"{sample.value:g}"
            values = f"0+{value}x{minutes}" if grows else f"{value}x{minutes}"
            series.append({"series": _series_name(sample.name, labels), "values": values})
    told_apart = sorted({label for alert in firing for label in alert} | {"alertname"})
    expected = [{"labels": _series_name("", alert), "value": 1} for alert in firing]
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "eval_time": f"{minutes}m",
                        "expr": f'count by ({", ".join(told_apart)}) (ALERTS{{alertstate="firing"}})',
                        "exp_samples": expected,
                    }
                ],
            }
        ],
    }
    return yaml.safe_dump(test, sort_keys=False)
