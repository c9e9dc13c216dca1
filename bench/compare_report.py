"""The tables of bench/compare.py: per measure, fairque, the best peer, the ratio, the issue's
target and whether this run met it (issue 17). Pure functions of the medians; ratios are
printed, never asserted. Above 1, a ratio means fairque is ahead: fairque / peer for rates,
peer / fairque for latency and server CPU (lower is better there).
"""

from __future__ import annotations

from typing import Any


def fmt(result: dict[str, Any] | None, key: str) -> str:
    if result is None:
        return "not run"
    if "skip" in result:
        return f"n/a ({result['skip']})"
    if "error" in result:
        return f"failed ({result['error']})"
    if key.startswith("latency"):
        cell = f"{result['p50']:.2f} / {result['p99']:.2f} ms"
        if "server_us" in result:  # the server's CPU per task at the 200/s trickle
            cell += f" ({result['server_us']:.0f} µs srv)"
        return cell
    if key == "server_us":
        return f"{result['server_us']:.1f} µs"
    cell = f"{result['rate']:,.0f}/s"
    if "server_us" in result:
        cell += f" ({result['server_us']:.0f} µs srv)"
    return cell


def ok(result: dict[str, Any] | None) -> bool:
    return result is not None and "skip" not in result and "error" not in result


#: the harness's reference row (redis-py and one list, bench/peers/floor_peer.py): not a queue,
#: so never the best peer
FLOOR = "floor"
#: fairque at an older commit (``compare.py --baseline``): the before of a before/after run,
#: never a peer
BASELINE = "fairque@base"
#: a change may cost this much of a figure before the before/after table flags it (issue 29)
TOLERANCE = 0.05


def rows(med: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, str]]:
    fq = med["fairque"]
    peers = {lib: per for lib, per in med.items() if lib not in ("fairque", FLOOR, BASELINE)}
    huey = peers.get("huey", {})

    def best(key: str, field: str, low: bool = False) -> tuple[str, dict[str, Any] | None]:
        # tuned: each peer at its better setting, its defaults or its tuned one; an intake
        # measure (fairque's second push path, ADR 47) against the peers' one push path
        key = key.removesuffix("_intake")
        keys = ["drain_defaults", key] if key == "drain_tuned" else [key]
        found = [(lib, per[k]) for lib, per in peers.items() for k in keys if ok(per.get(k))]
        if not found:
            return "", None
        pick = min if low else max
        return pick(found, key=lambda item: float(item[1][field]))

    def vs_huey(key: str, factor: float, value: float) -> tuple[str, str]:
        ref = huey.get(key)
        if not ok(ref):
            return f">= {factor:g}x huey", "n/a (huey not run)"
        assert ref is not None
        goal = factor * float(ref["rate"])
        return f">= {factor:g}x huey ({goal:,.0f}/s)", "yes" if value >= goal else "no"

    def absolute(value: float, goal: float, low: bool, text: str) -> tuple[str, str]:
        met = value <= goal if low else value >= goal
        return text, "yes" if met else "no"

    spec: list[tuple[str, str, str, Any]] = [
        ("enqueue one by one", "enqueue_one", "rate", lambda v: vs_huey("enqueue_one", 0.9, v)),
        ("enqueue bulk (batches of 1000)", "enqueue_bulk", "rate",
         lambda v: absolute(v, 40_000, False, ">= 40,000/s")),
        ("drain, defaults", "drain_defaults", "rate", lambda v: vs_huey("drain_defaults", 2, v)),
        ("drain, tuned (cap 100, prefetch 50)", "drain_tuned", "rate",
         lambda v: absolute(v, 20_000, False, ">= 20,000/s")),
        ("drain, AsyncWorker defaults", "drain_async", "rate",
         lambda v: vs_huey("drain_defaults", 1.5, v)),
        ("async producer, 100 concurrent pushes", "async_push", "rate",
         lambda v: vs_huey("enqueue_one", 3, v)),
        ("enqueue one by one, intake (ADR 47)", "enqueue_one_intake", "rate",
         lambda v: vs_huey("enqueue_one", 0.9, v)),
        ("enqueue bulk, intake", "enqueue_bulk_intake", "rate",
         lambda v: absolute(v, 40_000, False, ">= 40,000/s")),
        ("async producer, intake", "async_push_intake", "rate",
         lambda v: vs_huey("enqueue_one", 3, v)),
    ]  # fmt: skip
    out: list[dict[str, str]] = []
    for label, key, field, target in spec:
        mine = fq.get(key)
        name, peer = best(key, field)
        row = {"measure": label, "fairque": fmt(mine, key), "best peer": "none ran"}
        row.update({"ratio": "", "target": "", "met": ""})
        if peer is not None:
            row["best peer"] = f"{name} {fmt(peer, key)}"
        if ok(mine):
            assert mine is not None
            if peer is not None:
                row["ratio"] = f"{float(mine[field]) / float(peer[field]):.2f}x"
            row["target"], row["met"] = target(float(mine[field]))
        out.append(row)
    for label, key in (("", "latency"), (", intake producer", "latency_intake")):
        mine = fq.get(key)
        name, peer = best("latency", "p50", low=True)
        row = {"measure": f"latency at 200/s, p50 / p99{label}", "fairque": fmt(mine, key)}
        row.update({"best peer": f"{name} {fmt(peer, 'latency')}" if peer else "none ran"})
        row.update({"ratio": "", "target": "p50 <= 0.5 ms, p99 <= 1.5 ms", "met": ""})
        if ok(mine):
            assert mine is not None
            if peer is not None:
                row["ratio"] = f"{peer['p50'] / mine['p50']:.2f}x"
            row["met"] = "yes" if mine["p50"] <= 0.5 and mine["p99"] <= 1.5 else "no"
        out.append(row)
    for label, key in (("defaults", "drain_defaults"), ("tuned", "drain_tuned")):
        mine = fq.get(key)
        name, peer = best(key, "server_us", low=True)
        row = {"measure": f"server CPU per drained task, {label}"}
        row.update({"fairque": fmt(mine, "server_us"), "target": "<= 25 µs", "met": ""})
        row.update({"best peer": f"{name} {fmt(peer, 'server_us')}" if peer else "none ran"})
        row["ratio"] = ""
        if ok(mine):
            assert mine is not None
            if peer is not None:
                row["ratio"] = f"{peer['server_us'] / mine['server_us']:.2f}x"
            row["met"] = "yes" if mine["server_us"] <= 25 else "no"
        out.append(row)
    return out


def table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def before_after(med: dict[str, dict[str, dict[str, Any]]]) -> list[list[str]]:
    """Per measure and figure: the baseline, this tree, the ratio (above 1: this tree is
    better; rates new / old, latency and server CPU old / new) and a flag when this tree is
    more than :data:`TOLERANCE` worse."""
    base, new = med.get(BASELINE, {}), med["fairque"]
    out: list[list[str]] = []
    for key, mine in new.items():
        old = base.get(key)
        if not (ok(mine) and ok(old)):
            continue
        assert mine is not None
        assert old is not None
        fields = ("p50", "p99") if key.startswith("latency") else ("rate",)
        fields += ("server_us",) if "server_us" in mine and "server_us" in old else ()
        for field in fields:
            if not (old.get(field) and mine.get(field)):
                continue
            higher_is_better = field == "rate"
            ratio = mine[field] / old[field] if higher_is_better else old[field] / mine[field]
            flag = "worse" if ratio < 1 - TOLERANCE else ""
            out.append(
                [key, field, f"{old[field]:,.2f}", f"{mine[field]:,.2f}", f"{ratio:.3f}", flag]
            )
    return out
