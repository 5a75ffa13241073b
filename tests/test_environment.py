"""The three places that name dependencies agree: pyproject.toml, environment.yml (conda/Binder), requirements.lock."""

import pathlib
import re

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ ;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    return {_name(r) for r in requirements}


def environment_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {_name(r): r.split("==")[1] for r in pip}


def lock_pins() -> dict[str, str]:
    lines = (ROOT / "requirements.lock").read_text().split()
    return {_name(line): line.split("==")[1] for line in lines if "==" in line}


def test_environment_yml_lists_the_same_packages_as_pyproject():
    assert set(environment_pins()) == pyproject_packages()


def test_environment_yml_pins_the_locked_versions():
    lock = lock_pins()
    assert {name: lock.get(name) for name in environment_pins()} == environment_pins()


def test_every_declared_package_is_locked():
    assert pyproject_packages() - set(lock_pins()) == set()


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
