"""``cellgate show`` and ``cellgate report``: how a person (or a script) reviews a recorded run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SHOWN_BY_DEFAULT = 10  # review.show.CALLS_SHOWN, repeated here: `cellgate --help` must not import the review room


def _calls(value: str) -> int | None:
    if value == "all":
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of calls: give 'all' or a whole number, e.g. 20")
    return number


def _cell(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a cell number: cells are numbered from 1, as "
                                         "`cellgate show NOTEBOOK` lists them")
    return number


def add_show(sub: Any) -> None:
    show = sub.add_parser("show", help="summarise an audit notebook in the terminal (or as JSON)",
                          description="Cells with their times, status and program title, and among them the "
                          "record's notes of its branches (paused, resumed, forked, a trial kept or discarded, where "
                          "the session went on); each cell's calls with arguments, decision, rule, approver, outcome "
                          "and errors; totals per tool and outcome.")
    show.add_argument("notebook", help="the audit notebook (.ipynb) of the run")
    show.add_argument("--cell", type=_cell, metavar="N", help="only cell N (as the summary numbers them), with "
                      "its whole program")
    show.add_argument("--calls", type=_calls, default=SHOWN_BY_DEFAULT, metavar="N|all",
                      help=f"calls listed per cell, failures first (default {SHOWN_BY_DEFAULT}; 'all' lists every one)")
    show.add_argument("--json", action="store_true", help="print the summary as JSON for scripts (its shape is "
                      "documented in cellgate.gate.review.show_json)")

    def run_show(a: argparse.Namespace) -> int:
        if a.json:
            import json

            from cellgate.gate.review.show_json import json_view

            print(json.dumps(json_view(Path(a.notebook), cell=a.cell, calls=a.calls), indent=1))
            return 0
        from cellgate.gate.review.show import show as summarise

        summarise(Path(a.notebook), cell=a.cell, calls=a.calls)
        return 0

    show.set_defaults(run=run_show)


def add_report(sub: Any) -> None:
    report = sub.add_parser("report", help="write a self-contained, inert HTML page of a run",
                            description="Write one HTML page of a run (its cells, calls, timeline and totals) that "
                            "runs no script and loads nothing, to read or to attach.")
    report.add_argument("notebook", help="the audit notebook (.ipynb) of the run")
    report.add_argument("-o", "--output", required=True, help="the .html file to write")

    def run_report(a: argparse.Namespace) -> int:
        from cellgate.gate.review.report import write_report

        print(f"wrote {write_report(Path(a.notebook), Path(a.output))}")
        return 0

    report.set_defaults(run=run_report)


__all__ = ["add_report", "add_show"]
