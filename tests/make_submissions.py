"""Fixture submissions for the grader tests, built at test time from the current solution notebooks.

``tests/fixtures/submissions/NN_topic.toml`` describes a few learner submissions of notebook NN (the format is
explained at the top of ``02_masks.toml``): what the learner typed into which exercise, how they tampered with the
notebook, and what the grader must report. This module turns each description into a notebook, starting from the
learner notebook generated from the solution notebook *now*, so the fixtures never go stale: only function bodies are
stored, never copies of notebooks.

    python tests/make_submissions.py OUTDIR [COPIES]   # write every submission (COPIES of each), e.g. to time a batch
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attnlab_course import paths
from attnlab_course.authoring import STUB, find_exercises, learner_notebook

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

SPECS = Path(__file__).resolve().parent / "fixtures" / "submissions"
ATTACKS = Path(__file__).resolve().parent / "fixtures" / "attacks"
_KEYS = {"about", "base", "code", "prepend", "append", "check_source", "check_tags", "saved_output", "delete",
         "delete_checks", "strip_metadata", "expect"}


@dataclass
class Submission:
    notebook: str  # the solution notebook's stem, e.g. "02_masks"
    name: str  # e.g. "cheats"
    spec: dict = field(repr=False)

    @property
    def file_name(self) -> str:
        # deliberately not the notebook's own name: the grader must find the solution from the notebook metadata
        return f"{self.notebook[:2]}-{self.name}.ipynb"

    def expected(self, exercise_ids) -> dict[str, list[str]]:
        """``[status, words...]`` for every exercise of the notebook (unlisted ones take the base's default)."""
        default = ["passed"] if self.spec["base"] == "solution" else ["not attempted"]
        unknown = set(self.spec.get("expect", {})) - set(exercise_ids)
        if unknown:
            raise ValueError(f"{self.notebook}.toml [{self.name}]: no exercise {sorted(unknown)} in the notebook")
        return {ex: list(self.spec.get("expect", {}).get(ex, default)) for ex in exercise_ids}

    def build(self, solutions_dir: Path | None = None):
        """The submission as a notebook, built from ``solutions_dir/<notebook>.ipynb``."""
        path = Path(solutions_dir or paths.solutions_dir()) / f"{self.notebook}.ipynb"
        solution = nbformat.read(path, as_version=4)
        exercises = {ex.id: ex for ex in find_exercises(solution, str(path))}
        nb = learner_notebook(solution, self.notebook)  # same cell order as the solution
        spec = self.spec
        for ex_id in set(spec.get("code", {})) | set(spec.get("prepend", {})) | set(spec.get("append", {})) | set(
                spec.get("check_source", {})) | set(spec.get("check_tags", {})) | set(spec.get("delete", [])):
            if ex_id not in exercises:
                raise ValueError(f"{self.notebook}.toml [{self.name}]: no exercise {ex_id} in {path}")
        for ex_id, ex in exercises.items():
            cell, check = nb.cells[ex.exercise_cell], nb.cells[ex.check_cell]
            if ex_id in spec.get("code", {}):  # typed into the stub
                cell.source = _fill_stub(cell.source, spec["code"][ex_id], f"{self.notebook} {ex_id}")
            elif spec["base"] == "solution":
                cell.source = solution.cells[ex.exercise_cell].source
            if ex_id in spec.get("prepend", {}):
                cell.source = spec["prepend"][ex_id] + "\n" + cell.source
            if ex_id in spec.get("append", {}):
                cell.source = cell.source + "\n" + spec["append"][ex_id]
            if ex_id in spec.get("check_source", {}):
                check.source = spec["check_source"][ex_id]
            if ex_id in spec.get("check_tags", {}):
                check.metadata["tags"] = list(spec["check_tags"][ex_id])
            if "saved_output" in spec:
                text = f"Exercise {ex_id}: {spec['saved_output']}\n"
                check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        drop = {exercises[ex_id].exercise_cell for ex_id in spec.get("delete", [])}
        if spec.get("delete_checks"):
            drop |= {ex.check_cell for ex in exercises.values()}
        nb.cells = [cell for i, cell in enumerate(nb.cells) if i not in drop]
        if spec.get("strip_metadata"):
            for cell in nb.cells:
                cell.metadata.pop("attnlab", None)
        return nb


def _fill_stub(source: str, body: str, where: str) -> str:
    """Replace the learner stub (``# your code here`` + ``raise NotImplementedError``) by ``body``, indented alike."""
    lines = source.split("\n")
    for i in range(len(lines) - 1):
        if lines[i].strip() == STUB[0] and lines[i + 1].strip() == STUB[1]:
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            new = textwrap.indent(textwrap.dedent(body).strip("\n"), indent).split("\n")
            return "\n".join(lines[:i] + new + lines[i + 2:])
    raise ValueError(f"{where}: the exercise cell has no stub to fill")


def load(spec_dir: Path = SPECS) -> list[Submission]:
    """Every submission described in ``spec_dir/*.toml``."""
    submissions = []
    for path in sorted(Path(spec_dir).glob("*.toml")):
        for name, spec in tomllib.loads(path.read_text(encoding="utf-8")).items():
            if spec.get("base") not in ("solution", "learner") or set(spec) - _KEYS:
                raise ValueError(f"{path.name} [{name}]: base must be 'solution' or 'learner'; "
                                 f"unknown keys {sorted(set(spec) - _KEYS)}")
            submissions.append(Submission(path.stem, name, spec))
    return submissions


def write_all(outdir: Path, solutions_dir: Path | None = None, copies: int = 1,
              spec_dir: Path = SPECS) -> dict[str, Submission]:
    """Write every submission described in ``spec_dir`` into ``outdir``; return them by file name."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = {}
    for sub in load(spec_dir):
        nb = sub.build(solutions_dir)
        for n in range(copies):
            name = sub.file_name if copies == 1 else f"{n:02d}-{sub.file_name}"
            nbformat.write(nb, outdir / name)
            written[name] = sub
    return written


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    files = write_all(Path(sys.argv[1]), copies=int(sys.argv[2]) if len(sys.argv) == 3 else 1)
    print(f"wrote {len(files)} submissions to {sys.argv[1]}")
