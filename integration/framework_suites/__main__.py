"""Run the frameworks' own tests against the adapters and print the table.

``python -m integration.framework_suites [--baseline] [--only NAME] [-- pytest args]``: exits 1
if any selected test fails (``--baseline`` runs the same tests without the swap, to tell the
adapters' failures from the environment's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from integration.framework_suites.sources import sdist_tree
from integration.framework_suites.suites import SUITES, Suite

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@dataclass
class Outcome:
    suite: Suite
    ran: int
    failed: list[str]
    skipped: int
    deselected: int
    phase_b: int
    exercised: int


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", action="store_true", help="run without the swap")
    parser.add_argument("--only", action="append", help="run only this framework")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "framework-suites")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    deselected = tomllib.loads((HERE / "deselected.toml").read_text())
    outcomes = []
    for suite in SUITES:
        if args.only and suite.framework not in args.only:
            continue
        reasons: dict[str, str] = deselected.get(suite.framework, {})
        outcomes.append(run_suite(suite, reasons, args.cache, args.baseline, args.pytest_args))
    print_table(outcomes, args.baseline)
    return 1 if any(o.failed for o in outcomes) else 0


def run_suite(
    suite: Suite, reasons: dict[str, str], cache: Path, baseline: bool, extra: list[str]
) -> Outcome:
    root = sdist_tree(suite.package, cache)
    out = cache / "runs" / suite.framework
    out.mkdir(parents=True, exist_ok=True)
    junit, report = out / "junit.xml", out / "exercised.json"
    report.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:compozy_memory",
        "--rootdir",
        str(root),
        "-c",
        str(root / "pyproject.toml"),
        "-o",
        "addopts=",
        "--timeout",
        "120",
        "--junitxml",
        str(junit),
    ]
    if not baseline:
        command += ["-p", suite.plugin]
    for nodeid in reasons:
        command += ["--deselect", nodeid]
    command += [*suite.paths, *extra]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]),
        "COMPOZY_SUITE_REPORT": str(report),
    }
    print(f"== {suite.framework} {root.name}: {len(suite.paths)} files", flush=True)
    subprocess.run(command, cwd=root, env=env, check=False)
    ran, failed, skipped = read_junit(junit, root)
    exercised = len(json.loads(report.read_text())) if report.exists() else 0
    phase_b = sum(reason.startswith("phase B") for reason in reasons.values())
    return Outcome(suite, ran, failed, skipped, len(reasons) - phase_b, phase_b, exercised)


def read_junit(path: Path, root: Path) -> tuple[int, list[str], int]:
    if not path.exists():
        return 0, ["(pytest wrote no report)"], 0
    ran, skipped, failed = 0, 0, []
    # The report is the one our own pytest run just wrote.
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314
        ran += 1
        if case.find("skipped") is not None:
            skipped += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            failed.append(node_id(root, case.get("classname", ""), case.get("name", "")))
    return ran, failed, skipped


def node_id(root: Path, classname: str, name: str) -> str:
    """The pytest node id of a JUnit test case (its module path, classes, then its name)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (root / module).is_file():
            return "::".join([module.as_posix(), *parts[cut:], name])
    return f"{classname}::{name}"


def print_table(outcomes: list[Outcome], baseline: bool) -> None:
    mode = "without the swap (baseline)" if baseline else "against the adapters"
    print(f"\nframeworks' own tests, {mode}:")
    print(
        "| framework | tests run | built our session | skipped | deselected: cannot apply "
        "| deselected: wait for phase B | failures |"
    )
    print("|---|---|---|---|---|---|---|")
    for o in outcomes:
        print(
            f"| {o.suite.framework} | {o.ran} | {o.exercised} | {o.skipped} | {o.deselected} "
            f"| {o.phase_b} | {len(o.failed)} |"
        )
    for o in outcomes:
        for name in o.failed:
            print(f"FAILED {o.suite.framework}: {name}")
    passed = sum(o.ran - o.skipped - len(o.failed) for o in outcomes)
    print(f"{passed} passed, {sum(len(o.failed) for o in outcomes)} failed")


if __name__ == "__main__":
    sys.exit(main())
