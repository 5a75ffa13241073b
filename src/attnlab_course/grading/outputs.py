"""Everything a batch writes from its reports: the CSV, the feedback pages, the LMS exports, the similarity report
and the results file. ``attnlab-check --batch`` and ``attnlab-check merge`` both call :func:`write_all`, so the merge
of a batch's shards writes exactly what one batch writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import exports, feedback, results, similarity
from .points import Roster, Scheme
from .report import write_csv
from .runner import Report


@dataclass
class Outputs:
    """What to write, and where (None: not asked for)."""

    csv: Path | None = None
    feedback: Path | None = None
    exports: list[str] = field(default_factory=list)
    export_dir: Path = Path(".")
    similarity: Path | None = None
    results: Path | None = None

    def planned(self) -> list[Path]:
        """The files and folders this will write (to refuse unsafe ones before grading)."""
        paths = [p for p in (self.csv, self.similarity, self.results) if p is not None]
        paths += [self.export_dir / {"canvas": "canvas.csv", "moodle": "moodle.csv"}[e] for e in self.exports
                  if e != "gradescope"]
        return paths


def write_all(reports: list[Report], outputs: Outputs, scheme: Scheme, roster: Roster,
              shard=(1, 1), folder_size: int | None = None) -> list[str]:
    """Write every output asked for; lines saying what was written, for the terminal."""
    said = []
    for path in outputs.planned():
        path.parent.mkdir(parents=True, exist_ok=True)
    if outputs.results:
        results.write(reports, outputs.results, shard, folder_size)
        said.append(f"Results of shard {shard[0]}/{shard[1]} written to {outputs.results}")
    if outputs.csv:
        write_csv(reports, outputs.csv, scheme, roster)
        said.append(f"Results written to {outputs.csv}")
    if outputs.feedback:
        pages = feedback.write_pages(reports, outputs.feedback, scheme, roster)
        said.append(f"{len(pages)} feedback pages written to {outputs.feedback}")
    for kind in outputs.exports:
        written = exports.write(kind, reports, outputs.export_dir, scheme, roster)
        said.append(f"{kind.capitalize()} export written to {written}")
    if outputs.similarity:
        pairs = similarity.compare(reports, scheme.solutions_dir, roster)
        similarity.write_report(pairs, outputs.similarity)
        flagged = sum(p.score >= similarity.THRESHOLD for p in pairs)
        said.append(f"Similarity report written to {outputs.similarity}: {flagged} of {len(pairs)} pairs of learners "
                    f"to look at (evidence, not a verdict)")
    return said
