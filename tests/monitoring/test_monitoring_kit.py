"""deploy/monitoring/: the Prometheus rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``), and neither the rules nor the Grafana dashboard name a fairque metric
the code does not export (issue 33 item 3, ADR 72).

The exported names come from a real scrape of both exports (:mod:`tests.monitoring.scrape`),
not from a list typed here; a ``fairque...:...`` name must be a recording rule of the rules
file. Each check is shown failing on a seeded defect below.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from .scrape import exported_names

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "monitoring" / "prometheus"
RULES = PROMETHEUS / "fairque-rules.yml"
RULE_TESTS = PROMETHEUS / "fairque-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana" / "fairque-dashboard.json"

#: A recording rule's name (``level:metric:operations``) of fairque's.
_RECORDED = re.compile(r"\bfairque[a-z_]*:[a-zA-Z0-9_:]+")
#: A metric name of fairque's.
_METRIC = re.compile(r"\bfairque_[a-zA-Z0-9_]+")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
    return found


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def rule_exprs(rules: Mapping[str, Any]) -> Iterator[str]:
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            yield str(rule["expr"])


def recorded(rules: Mapping[str, Any]) -> set[str]:
    return {
        str(rule["record"])
        for group in rules.get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    }


def dashboard_exprs(node: Any) -> Iterator[str]:
    """Every PromQL text of a Grafana dashboard: targets' ``expr``, variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition", "query") and isinstance(value, str):
                yield value
            else:
                yield from dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_exprs(item)


def unknown_names(
    exprs: Iterable[str], exported: set[str], records: set[str]
) -> tuple[set[str], set[str]]:
    """``(metrics not exported, recording rules not defined)`` named in ``exprs``."""
    metrics: set[str] = set()
    recordings: set[str] = set()
    for expr in exprs:
        recordings |= set(_RECORDED.findall(expr))
        metrics |= set(_METRIC.findall(_RECORDED.sub(" ", expr)))
    return metrics - exported, recordings - records


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_names()


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def test_promtool_check_rules() -> None:
    result = _run(_promtool(), "check", "rules", RULES.name, cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules() -> None:
    result = _run(_promtool(), "test", "rules", RULE_TESTS.name, cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_tests_fail_on_a_seeded_defect(tmp_path: Path) -> None:
    """The failure-rate alert's threshold moved from 10 % to 50 %: its unit test fails."""
    promtool = _promtool()
    text = RULES.read_text()
    seeded = text.replace(
        "fairque:task_failure_ratio:rate5m > 0.1", "fairque:task_failure_ratio:rate5m > 0.5"
    )
    assert seeded != text
    (tmp_path / RULES.name).write_text(seeded)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = _run(promtool, "test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "FairqueHighFailureRate" in result.stdout + result.stderr


def test_the_rules_cover_what_the_issue_asks(rules: dict[str, Any]) -> None:
    alerts = {
        str(rule["alert"]): str(rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert "fairque_tier:oldest_ready_age_seconds:max" in alerts["FairqueBacklogOld"]  # per tier
    assert "fairque_tenant_starving" in alerts["FairqueTenantStarving"]
    assert "fairque_queue_dlq_size" in alerts["FairqueDeadLettersGrowing"]
    assert 'fairque_workers{state="live"}' in alerts["FairqueNoLiveWorkers"]
    assert "fairque:task_failure_ratio:rate5m" in alerts["FairqueHighFailureRate"]
    memory = alerts["FairqueServerMemoryNearMax"]
    assert "redis_memory_used_bytes" in memory  # redis_exporter's names
    assert "redis_memory_max_bytes" in memory


def test_rules_name_only_exported_metrics(rules: dict[str, Any], exported: set[str]) -> None:
    missing, undefined = unknown_names(rule_exprs(rules), exported, recorded(rules))
    assert not missing, f"the rules name metrics the code does not export: {sorted(missing)}"
    assert not undefined, f"the rules use recordings no rule defines: {sorted(undefined)}"


def test_the_dashboard_names_only_exported_metrics(
    rules: dict[str, Any], exported: set[str]
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = list(dashboard_exprs(dashboard))
    assert len(exprs) >= 15, exprs
    missing, undefined = unknown_names(exprs, exported, recorded(rules))
    assert not missing, f"panels name metrics the code does not export: {sorted(missing)}"
    assert not undefined, f"panels use recordings no rule defines: {sorted(undefined)}"


def test_the_dashboard_shows_what_the_issue_asks() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    text = {
        panel["title"]: " ".join(t["expr"] for t in panel.get("targets", []))
        for panel in dashboard["panels"]
    }
    assert any("share_ratio" in e and "weight" in e for e in text.values())  # share vs weight
    assert any("fairque_queue_depth" in e for e in text.values())
    assert any("task_wait_seconds:p99" in e for e in text.values())  # wait p99 per tier
    assert any("fairque_queue_dlq_size" in e for e in text.values())
    assert any("fairque_workers" in e for e in text.values())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_name_check_fails_on_a_seeded_defect(rules: dict[str, Any], exported: set[str]) -> None:
    """A panel naming a metric that is not exported (a typo, or one since removed), and one
    naming a recording no rule defines, are both reported."""
    dashboard = json.loads(DASHBOARD.read_text())
    dashboard["panels"][1]["targets"][0]["expr"] = "fairque_queue_depht + fairque:nope:rate5m"
    missing, undefined = unknown_names(dashboard_exprs(dashboard), exported, recorded(rules))
    assert missing == {"fairque_queue_depht"}
    assert undefined == {"fairque:nope:rate5m"}
    # and a metric the worker no longer exports (the queue counters it dropped, ADR 72)
    assert "fairque_queue_finished_total" not in exported
    assert "fairque_tasks_pushed_total" not in exported
