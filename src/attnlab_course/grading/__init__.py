"""``attnlab-check``: grading a learner's "Try it" exercises, split by role around the protocol that the learner's
kernel and the grader share (:mod:`attnlab.exercises._protocol`: every message, and the one verdict type).

* :mod:`.cli`: the command line;
* :mod:`.runner`: one grading and a batch of them (it puts the parts below together, and takes every result from
  the trusted side's verdicts);
* :mod:`.submission`: the submitted file, read safely and matched to its solution notebook;
* :mod:`.notebook`: the notebook nbval runs for one grading, and :mod:`.slicing`, which of the notebook's own cells
  it needs (a dependency analysis of names, by ast and symtable);
* :mod:`.sandbox` and :mod:`.isolation`: the bubblewrap sandbox of each grading and its limits, and its uid and
  cgroup on the host;
* :mod:`.trusted`: the trusted judge, which decides each exercise's verdict in the grader's process;
* :mod:`.nbval_hooks`: the pytest plugin that runs the trusted side inside the nbval run, :mod:`.kernel`, the
  learner's kernel it hands nbval (launched before pytest loads), and :mod:`.record`, what it writes down for the
  runner;
* :mod:`.report`: the table, the batch summary and the CSV;
* :mod:`.outputs`: everything a batch (or the merge of its shards) writes: the CSV, :mod:`.feedback` pages,
  :mod:`.exports` for Canvas, Moodle and Gradescope, the :mod:`.similarity` report and the :mod:`.results` file,
  weighed by :mod:`.points` (points per exercise, overrides, roster);
* :mod:`.gradescope`: the grader as a Gradescope autograder (``run_autograder``).
"""

import importlib

# Imported on first use (PEP 562): every grading process loads this package for its pytest plugin (.nbval_hooks), and
# importing the command line, the reports and the runner there would delay the kernel's start by a quarter second.
_HOMES = {"main": "cli", "format_report": "report", "format_summary": "report", "write_csv": "report",
          "DEFAULT_TIMEOUT": "runner", "STATUSES": "runner", "Report": "runner", "Result": "runner",
          "available_cores": "runner", "default_jobs": "runner", "grade": "runner", "grade_many": "runner",
          "SubmissionError": "submission"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


__all__ = ["DEFAULT_TIMEOUT", "STATUSES", "Report", "Result", "SubmissionError", "available_cores", "default_jobs",
           "format_report", "format_summary", "grade", "grade_many", "main", "write_csv"]
