"""The three places that name dependencies agree: pyproject.toml, environment.yml (conda/Binder), requirements.lock."""

import pathlib
import re

import pytest
import yaml
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ ;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_packages(pyproject: pathlib.Path = ROOT / "pyproject.toml") -> set[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    return {_name(r) for r in requirements}


def environment_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {_name(r): r.split("==")[1] for r in pip}


def lock_pins(python: str = "3.11") -> dict[str, str]:
    """The versions requirements.lock installs on the given Python (it pins older versions for Python 3.10)."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"python_version": python}):
                assert requirement.name.lower() not in pins, f"{requirement.name} is pinned twice for Python {python}"
                pins[_name(requirement.name)] = str(requirement.specifier).removeprefix("==")
    return pins


def test_environment_yml_lists_the_same_packages_as_pyproject():
    assert set(environment_pins()) == pyproject_packages()


def test_environment_yml_pins_the_locked_versions():
    lock = lock_pins()
    assert {name: lock.get(name) for name in environment_pins()} == environment_pins()


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_every_declared_package_is_locked_once_for_each_python(python):
    assert pyproject_packages() - set(lock_pins(python)) == set()


def test_environment_yml_python_is_supported():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    major, minor = map(int, python.split("=")[1].split(".")[:2])
    assert (major, minor) >= (3, 10)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1].strip() == "make test"


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_every_package_the_course_tooling_declares_is_locked_once_for_each_python(python):
    """attnlab-course (course/pyproject.toml) is installed from the same lock file by make install."""
    assert pyproject_packages(ROOT / "course" / "pyproject.toml") - {"attnlab"} - set(lock_pins(python)) == set()
