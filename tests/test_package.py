"""The two distributions of this repository, built as a user would get them. ``attnlab`` (``python -m build``, the
learner's) holds the library and the exercise checkers and nothing else: no ``attnlab_course``, no grader, no
notebook. ``attnlab-course`` (``course/``) holds the course tooling, ``attnlab-check`` and the solution notebooks.
Installed into a fresh virtual environment, the two give a working ``attnlab`` and an ``attnlab-check`` that grades
with the solution notebooks its wheel ships; and the Colab cell's install command installs the learner's wheel alone.

Speed: the wheels are built once per module (pip fetches setuptools for the isolated builds); the module took 159 s
on two cores shared with a dozen other jobs (load about 11). The fresh environments get their dependencies without
downloading them: every distribution that ``attnlab`` and ``attnlab-course`` need (followed recursively through the
requirements, nothing else) is linked from the environment running the tests into a folder that the fresh
environment's ``.pth`` file names. A package missing from attnlab-course's requirements is therefore missing there
too, and grading fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from attnlab_course import authoring, colab, paths
from test_environment import ROOT

SOLUTIONS = authoring.solution_notebooks(paths.SOLUTIONS)


def copy_checkout(target: Path) -> Path:
    """A copy of this checkout without its environment and build leftovers, as a fresh clone would have it (builds
    write into the source tree, e.g. ``src/attnlab.egg-info``; in a copy, concurrent tests cannot collide there)."""
    import shutil

    junk = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                  ".hypothesis", ".ipynb_checkpoints", "artifacts", "results")
    shutil.copytree(ROOT, target, ignore=junk, symlinks=True)
    return target


def _env(**extra) -> dict:
    """The environment of a command run in a fresh venv: nothing that points back at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNLAB_SOLUTIONS", "PYTHONPATH", "VIRTUAL_ENV")
           and not k.startswith("PYTEST_")}
    return {**env, **extra}


def run(command, cwd, timeout=600, **kwargs):
    return subprocess.run([str(c) for c in command], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def closure(requirements: list[str]) -> set[str]:
    """The installed distributions that ``requirements`` need, recursively (markers evaluated, extras followed)."""
    found: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        wanted = [(name, e) for e in ("", *sorted(req.extras))]
        for key in wanted:
            if key in found:
                continue
            found.add(key)
            try:
                dist = distribution(name)
            except PackageNotFoundError:
                continue  # not installed here (e.g. a platform-specific dependency); pip check would say
            todo += [(Requirement(r), key[1]) for r in dist.requires or []]
    return {name for name, _ in found}


def link_dependencies(target: Path, requirements: list[str]) -> None:
    """Symlink into ``target`` the files of every distribution ``requirements`` need, as they are installed here."""
    target.mkdir()
    for name in sorted(closure(requirements)):
        dist = distribution(name)
        site = Path(dist.locate_file(""))
        for top in sorted({Path(str(f)).parts[0] for f in dist.files or []} - {"..", "__pycache__"}):
            if not (target / top).exists() and (site / top).exists():
                (target / top).symlink_to(site / top)


def fresh_venv(path: Path, requirements: list[str]) -> Path:
    """A new venv (its own site-packages, no attnlab) whose dependencies are linked from this one; its python."""
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    link_dependencies(path / "dependencies", requirements)
    (site / "dependencies.pth").write_text(str(path / "dependencies") + "\n")
    return python


def requirements(name: str, extra: str = "") -> list[str]:
    """The requirements of the installed distribution ``name``, with those of ``extra``, from its metadata (its
    pyproject.toml), but for this repository's own distributions; and pip."""
    wanted = []
    for req in map(Requirement, distribution(name).requires or []):
        if canonicalize_name(req.name) in OURS:
            continue
        if req.marker is None or req.marker.evaluate({"extra": extra}):
            req.marker = None
            wanted.append(str(req))
    return wanted + ["pip"]


OURS = {"attnlab", "attnlab-course"}


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _wheel_text(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(next(n for n in archive.namelist() if n.endswith(suffix))).decode()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The two distributions of a copy of this checkout: ``python -m build`` of attnlab (wheel and sdist), and the
    wheel of attnlab-course (``python -m build --wheel course``): {"learner": ..., "sdist": ..., "course": ...}."""
    out = tmp_path_factory.mktemp("dist")
    source = copy_checkout(tmp_path_factory.mktemp("checkout") / "attention-from-scratch")
    for command in ([sys.executable, "-m", "build", "--outdir", out, source],
                    [sys.executable, "-m", "build", "--wheel", "--outdir", out, source / "course"]):
        result = run(command, cwd=out)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (learner,), (sdist,) = out.glob("attnlab-*.whl"), out.glob("attnlab-*.tar.gz")
    (course,) = out.glob("attnlab_course-*.whl")
    return {"learner": learner, "sdist": sdist, "course": course}


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory):
    """A fresh venv with both wheels installed (their dependencies linked): its folder."""
    where = tmp_path_factory.mktemp("venv")
    python = fresh_venv(where / "env", requirements("attnlab") + requirements("attnlab-course"))
    result = run([python, "-m", "pip", "install", "--no-index", built["learner"], built["course"]], cwd=where)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return where / "env"


def test_the_learner_wheel_has_the_library_and_the_checkers_and_nothing_of_the_course(built):
    names = _wheel_names(built["learner"])
    assert {"attnlab/__init__.py", "attnlab/exercises/__init__.py", "attnlab/exercises/_protocol.py"} <= set(names)
    assert {n.split("/")[0] for n in names} == {"attnlab", f"attnlab-{distribution('attnlab').version}.dist-info"}
    assert not [n for n in names if "attnlab_course" in n or n.endswith(".ipynb") or "grading" in n
                or "course" in n.split("/")[1:]], "no course tooling, no grader, no notebook"
    assert not [n for n in names if n.endswith("entry_points.txt")], "no command: attnlab-check is attnlab-course's"
    with tarfile.open(built["sdist"]) as sdist:
        members = sdist.getnames()
    assert not [m for m in members if m.endswith(".ipynb") or "attnlab_course" in m], "nor in the sdist"


def test_the_course_wheel_has_the_tooling_the_grader_and_the_solution_notebooks(built):
    names = _wheel_names(built["course"])
    shipped = sorted(n for n in names if n.endswith(".ipynb"))
    assert shipped == [f"attnlab_course/solutions/{p.name}" for p in SOLUTIONS]
    with zipfile.ZipFile(built["course"]) as wheel:
        assert all(wheel.read(f"attnlab_course/solutions/{p.name}") == p.read_bytes() for p in SOLUTIONS)
    assert {"attnlab_course/paths.py", "attnlab_course/authoring.py", "attnlab_course/grading/runner.py",
            "attnlab_course/grading/trusted.py", "attnlab_course/grading/sandbox.py",
            "attnlab_course/publish/templates/attnlab-slides/index.html.j2"} <= set(names)
    assert not [n for n in names if n.startswith("attnlab/")], "the library is the other distribution's"
    assert "attnlab-check = attnlab_course.grading.cli:main" in _wheel_text(built["course"], "entry_points.txt")
    requires = [line for line in _wheel_text(built["course"], "METADATA").splitlines()
                if line.startswith("Requires-Dist:")]
    assert f"Requires-Dist: attnlab=={distribution('attnlab').version}" in requires


def test_the_installed_packages_are_the_wheels_and_find_their_own_solutions(installed, tmp_path):
    code = ("import attnlab, attnlab_course, numpy as np; from attnlab_course.paths import solutions_dir as d\n"
            "print(attnlab.__file__); print(attnlab_course.__file__); print(d()); "
            "print(attnlab.softmax(np.zeros(4)).tolist())")
    result = run([installed / "bin" / "python", "-c", code], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    module, course, solutions, weights = result.stdout.splitlines()
    assert all(Path(p).is_relative_to(installed) for p in (module, course, solutions))
    assert Path(solutions) == Path(course).parent / "solutions"
    assert weights == "[0.25, 0.25, 0.25, 0.25]"


def test_the_installed_attnlab_check_grades_a_submission(installed, tmp_path):
    """One exercise answered with its reference solution, the others untouched: it passes, they are not attempted."""
    solution_path = next(p for p in SOLUTIONS if authoring.find_exercises(nbformat.read(p, as_version=4)))
    solution = nbformat.read(solution_path, as_version=4)
    exercises = authoring.find_exercises(solution)
    learner = authoring.learner_notebook(solution, solution_path.stem)
    first = exercises[0]
    learner.cells[first.exercise_cell].source = solution.cells[first.exercise_cell].source
    nbformat.write(learner, tmp_path / "ada.ipynb")
    result = run([installed / "bin" / "attnlab-check", "ada.ipynb"], cwd=tmp_path)  # no notebooks/ folder here
    out = result.stdout
    assert result.returncode == (0 if len(exercises) == 1 else 1), out + result.stderr[-2000:]
    assert f"ada.ipynb  (notebook {solution_path.stem})" in out
    assert re.search(rf"^  {re.escape(first.id)}\s+passed$", out, re.M), out
    assert all(re.search(rf"^  {re.escape(e.id)}\s+not attempted", out, re.M) for e in exercises[1:]), out
    assert f"1 of {len(exercises)} exercises passed." in out


def test_the_colab_cells_install_command_installs_attnlab_from_a_wheel(built, tmp_path):
    """The cell as the notebooks carry it, with the wheel in place of the git URL, on a pretend Colab."""
    python = fresh_venv(tmp_path / "env", requirements("attnlab"))
    fake_colab = ("import sys, types\n"
                  "output = types.ModuleType('google.colab.output')\n"
                  "output.enable_custom_widget_manager = lambda: print('custom widget manager enabled')\n"
                  "package = types.ModuleType('google.colab')\n"
                  "package.output = output\n"
                  "sys.modules.update({'google.colab': package, 'google.colab.output': output})\n")
    cell = colab.cell_source()
    assert colab.requirement() in cell
    result = run([python, "-c", fake_colab + cell.replace(colab.requirement(), str(built["learner"]))], cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "custom widget manager enabled"
    code = "import attnlab, importlib.metadata as m; print(attnlab.__file__, m.version('attnlab'))"
    check = run([python, "-c", code], cwd=tmp_path)
    module, version = check.stdout.split()
    assert Path(module).is_relative_to(tmp_path / "env") and version == distribution("attnlab").version
    learner_only = run([python, "-c", "import attnlab.exercises; import attnlab_course"], cwd=tmp_path)
    assert "No module named 'attnlab_course'" in learner_only.stderr, "a learner's install has no course tooling"
    assert not (tmp_path / "env" / "bin" / "attnlab-check").exists()


@pytest.mark.parametrize("package", ["attnlab", "attnlab_course.grading"])
def test_every_exported_name_exists(package):
    import importlib

    module = importlib.import_module(package)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []
