"""Each phase run under a guard, the verdict over every check, and the markdown report with
its JSON line."""
from __future__ import annotations

import json
import sys
from typing import Any, Callable

from .plan import STAND_INS, Plan


def guarded(name: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, or, when it raises (out of memory, a cuDNN error, ...), ``{"ok": False,
    "error": ...}``: one phase's failure is recorded and the next phase runs."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - whatever it is, the report must still be written
        text = " ".join(str(err).split())[:300]
        print(f"gpu_check: phase {name} failed: {type(err).__name__}: {text}", file=sys.stderr)
        return {"ok": False, "error": f"{type(err).__name__}: {text}"}


def failures(report: dict[str, Any], phases: list[str]) -> list[str]:
    """The checks that failed: an entry (at any depth of a phase) with ``ok`` false or an
    ``error``, and more than one synchronizing call per rollout step on CUDA."""
    found: list[str] = []

    def walk(value: Any, at: str) -> None:
        if isinstance(value, dict):
            if value.get("ok") is False or "error" in value or value.get("first_run_ok") is False:
                found.append(at)
            for key, inner in value.items():
                if isinstance(inner, dict):
                    walk(inner, f"{at}.{key}")

    for phase in phases:
        walk(report.get(phase, {"error": "missing"}), phase)
    per_step = report.get("syncs", {}).get("per_rollout_step") if isinstance(report.get("syncs"), dict) else None
    if isinstance(per_step, (int, float)) and per_step > 1.0:
        found.append("syncs.per_rollout_step")
    return found


def _steps(entry: Any) -> str:
    if isinstance(entry, dict) and "env_steps_per_s" in entry:
        return f"{entry['env_steps_per_s']:,.0f}"
    return f"error: {entry.get('error')}" if isinstance(entry, dict) else str(entry)


def _ratio(a: Any, b: Any) -> str:
    if all(isinstance(x, dict) and "env_steps_per_s" in x for x in (a, b)):
        return f"{a['env_steps_per_s'] / b['env_steps_per_s']:.2f}x"
    return "-"


def _share(entry: Any) -> str:
    return f"{entry['rollout_share']:.0%}" if isinstance(entry, dict) and "rollout_share" in entry else "-"


def _cell(value: Any) -> str:
    return str(value).replace("|", "/").replace("\n", " ")


def render(report: dict[str, Any], plan: Plan) -> str:
    """The markdown tables and the JSON line; every section shows what its phase gave,
    an error included."""
    gpu = "CPU (standing in for the GPU)" if plan.rehearsal else "GPU"
    command = ("python bench/gpu_check.py" + (" --rehearse-on-cpu" if plan.rehearsal else "")
               + (" --skip-tests" if plan.skip_tests else ""))
    title = "GPU check, CPU rehearsal" if plan.rehearsal else "GPU check"
    lines = [f"# {title}: {report['gpu']} x{report['gpus']}, driver {report['driver']}, torch {report['torch']}, "
             f"CUDA {report['cuda']}, cuDNN {report['cudnn']}, NCCL {report['nccl']}",
             "", f"Command: `{command}`", ""]
    if plan.rehearsal:
        lines += ["The CPU stands in for CUDA in every phase; what that cannot show:", "",
                  *(f"- {line}" for line in STAND_INS), ""]
    lines += [f"| num-envs | {gpu} env-steps/s | CPU env-steps/s (1 core) | {gpu} / CPU | {gpu} rollout share |",
              "|---:|---:|---:|---:|---:|"]
    table = report["throughput"]
    if "error" in table:
        lines.append(f"| all | error: {_cell(table['error'])} | | | |")
    else:
        for n in plan.sizes:
            g, c = table["gpu"][str(n)], table["cpu"][str(n)]
            lines.append(f"| {n} | {_cell(_steps(g))} | {_cell(_steps(c))} | {_ratio(g, c)} | {_share(g)} |")
    lines += ["", f"| at {plan.variant_envs} envs on the {gpu} | env-steps/s |", "|---|---:|"]
    variants = report["variants"]
    for name, value in (variants.items() if "error" not in variants else [("all", variants)]):
        lines.append(f"| {name} | {_cell(_steps(value))} |")
    tests = report["tests"]
    test_result = tests.get("summary") or tests.get("error") or ("skipped (--skip-tests)" if tests.get("skipped")
                                                                  else "no result")
    syncs = report["syncs"]
    lines += ["", "| check | result |", "|---|---|",
              f"| tests/distributed/test_cuda.py | {_cell(test_result)} {_cell('; '.join(tests.get('failures', [])))}"
              " |",
              "| syncs per rollout step / per update | " + (
                  f"{_cell(syncs.get('per_rollout_step'))} / {_cell(syncs.get('per_update'))} |" if "error" not in syncs
                  else f"error: {_cell(syncs['error'])} |"),
              f"| update LSTM dtype under --autocast bf16 | {_cell(report['bf16_dtypes'])} |",
              f"| numerics | {_cell(report['numerics'])} |"]
    for name, value in _entries(report["distributed_runs"]):
        lines.append(f"| {plan.backend} run, {name.replace('_', ' ')} | {_cell(value)} |")
    for name, value in _entries(report["resume"]):
        lines.append(f"| resume {name.replace('_', ' ')} | {_cell(value)} |")
    lines.append(f"| stalled peer (SIGSTOP rank 1) | {_cell(report['stalled_peer'])} |")
    failed = report["failed"]
    lines += ["", f"All checks passed: {not failed} ({report['seconds']} s)"
              + (f"; failed: {', '.join(failed)}" if failed else ""), "", json.dumps(report)]
    return "\n".join(lines)


def _entries(section: Any) -> list[tuple[str, Any]]:
    if isinstance(section, dict) and "error" not in section:
        return list(section.items())
    return [("all", section)]
