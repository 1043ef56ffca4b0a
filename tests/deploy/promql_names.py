"""The kvtier metric names that the Grafana dashboard and the Prometheus alerts ask for, and which of
them a kvtierd /metrics page does not export.

A PromQL expression names a series by its metric name, optionally followed by label matchers in
braces. Every identifier starting with `kvtier_` in an expression is taken as a metric name: no label
or function of ours starts that way. A histogram exports its series with the suffixes _bucket, _sum
and _count, and that is how PromQL must name them, so names are compared with the sample names the
page holds, not with its `# TYPE` families. Equality matchers with a literal value
(`counter="io_errors"`, `tier="nvme"`) are checked too: a misspelt device counter would otherwise
plot nothing without any error.
"""
import json
import re

import yaml

from helpers import parse_metrics

NAME = re.compile(r"\bkvtier_[A-Za-z0-9_:]*")
SELECTOR = re.compile(r"\b(kvtier_[A-Za-z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*\"((?:[^\"\\]|\\.)*)\"")


def dashboard_expressions(dashboard):
    """Every PromQL text of a Grafana dashboard (parsed JSON): panel targets' `expr` (rows and
    nested panels included) and the templating variables' queries."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and isinstance(query, str):
            found.append(query)
    return found


def rules_expressions(rules):
    """Every `expr` of a Prometheus rules file (parsed YAML)."""
    return [rule["expr"] for group in rules.get("groups", []) for rule in group.get("rules", [])]


def load_expressions(dashboard_path, rules_path):
    with open(dashboard_path) as f:
        exprs = dashboard_expressions(json.load(f))
    with open(rules_path) as f:
        exprs += rules_expressions(yaml.safe_load(f))
    return exprs


def parse_exposition(text):
    """Prometheus text format as {sample name: [{label: value}, ...]}."""
    series = {}
    for name, labels in parse_metrics(text):
        series.setdefault(name, []).append({k: v for k, _, v in MATCHER.findall(labels)})
    return series


def used_names(expressions):
    return sorted({name for expr in expressions for name in NAME.findall(expr)})


def missing(expressions, exposition):
    """What the expressions ask for that the exposition text lacks: unknown metric names, and
    `name{label="value"}` selectors that no exported series of that name matches. Empty when
    everything is exported. Matcher values holding a Grafana variable ($...) are not checked."""
    series = parse_exposition(exposition)
    problems = [name for name in used_names(expressions) if name not in series]
    for expr in expressions:
        for name, matchers in SELECTOR.findall(expr):
            if name not in series:
                continue
            for label, op, value in MATCHER.findall(matchers):
                if op != "=" or "$" in value:
                    continue
                if not any(labels.get(label) == value for labels in series[name]):
                    problems.append(f'{name}{{{label}="{value}"}}')
    return sorted(set(problems))
