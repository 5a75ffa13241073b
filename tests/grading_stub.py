"""``attnlab-check`` with nbval replaced by a fast, deterministic stand-in, run as a process of its own.

    python tests/grading_stub.py --batch DIR --no-sandbox ...   # any attnlab-check arguments

Everything else is the real grader: the command line, reading each file, finding its solution and its exercise
cells, building the grading notebook, settling the results from the record, and every output. Only the nbval run
(a kernel, ~10 s per submission) is replaced: each exercise's verdict is decided from the learner's source alone
(the stub left in place: not attempted; an endless loop: timed out; a cell that is the reference solution's body:
passed; anything else: failed, with a message of several lines that quotes the learner's last line). The tests of
sharding use it to run several batches as separate processes in seconds.
"""

from __future__ import annotations

import json
import sys

from attnlab.exercises import _protocol
from attnlab.exercises._protocol import Verdict
from attnlab_course.grading import cli, record, runner


def verdict(ex_id: str, source: str) -> Verdict:
    if "raise NotImplementedError" in source:
        return Verdict(ex_id, "not attempted", "replace `raise NotImplementedError` with your code")
    if "while True" in source:
        return Verdict(ex_id, "timed out", "your function did not return within 5 s")
    if "### BEGIN SOLUTION" in source or "# (T, S)" in source or "fresh copy" in source:
        return Verdict(ex_id, "passed")
    last = [line for line in source.splitlines() if line.strip()][-1].strip()
    return Verdict(ex_id, "failed", f"the answer is wrong for exercise {ex_id}\n  expected: the reference\n"
                                    f"  got:      what `{last}` gives\n  hint: compare with the notebook's example")


def fake_run_nbval(nb, timeout=runner.DEFAULT_TIMEOUT, setup_timeout=runner.SETUP_TIMEOUT, *, grading,
                   use_sandbox=False, deadline=None):
    nb = nb() if callable(nb) else nb  # the runner may hand over a function that makes the notebook
    lines = []
    for cell in nb.cells:
        meta = cell.metadata.get("attnlab", {})
        if meta.get("role") == "solution":
            ex_id = meta["exercise"]
            lines.append(json.dumps({"kind": "cell", "exercise": ex_id}))
            found = verdict(ex_id, grading["sources"][ex_id])
            lines.append(json.dumps({"kind": "verdict", **_protocol.part_to_data(found)}))
    return runner.Run(record.read(lines))


if __name__ == "__main__":
    runner.run_nbval = fake_run_nbval
    sys.exit(cli.main(sys.argv[1:]))
