"""Grading a learner's "Try it" exercises through nbval: ``attnlab-check``.

* :mod:`.runner`: one submission graded (the grading notebook, the nbval run, the records read back), and many;
* :mod:`.sandbox` and :mod:`.isolation`: the bubblewrap sandbox of each grading, and its uid and cgroup on the host;
* :mod:`.nbval_hooks`: the pytest plugin loaded into that nbval run;
* :mod:`.report`: the table, the batch summary and the CSV;
* :mod:`.cli`: the command line.
"""

from .cli import main
from .report import format_report, format_summary, write_csv
from .runner import DEFAULT_TIMEOUT, STATUSES, Report, Result, SubmissionError, available_cores, grade, grade_many

__all__ = ["DEFAULT_TIMEOUT", "STATUSES", "Report", "Result", "SubmissionError", "available_cores", "format_report",
           "format_summary", "grade", "grade_many", "main", "write_csv"]
