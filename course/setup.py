"""What course/pyproject.toml cannot declare: the sources are in ../src, and the solution notebooks go into the wheel.

The package ``attnlab_course`` (and its subpackages) is taken from ``../src``, beside ``attnlab``, which is the other
distribution's (``../pyproject.toml``). Where the solution notebooks are is :mod:`attnlab_course.paths`'s to say: it
is loaded here by file name (it needs only the standard library). In a wheel, ``notebooks/solutions/NN_topic.ipynb``
is copied to ``attnlab_course/solutions/NN_topic.ipynb``, where ``attnlab-check`` finds the reference notebooks when
attnlab-course is installed from it; there is never a second committed copy. An editable install
(``pip install -e course``, what ``make install`` does) copies nothing: the grader reads ``notebooks/solutions``.
"""

import os
import runpy
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

SRC = "../src"  # relative to this folder, as setuptools wants it
os.chdir(Path(__file__).resolve().parent)  # pip runs the build here; make sure of it for relative paths
paths = runpy.run_path(str(Path(SRC, "attnlab_course", "paths.py")))


class build_py_with_solutions(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        notebooks = paths["solution_notebooks"](paths["SOLUTIONS"])
        if not notebooks:
            raise SystemExit(f"no solution notebooks in {paths['SOLUTIONS']}: the wheel would have no reference "
                             "notebooks")
        target = Path(self.build_lib, "attnlab_course", paths["SHIPPED_SOLUTIONS"].name)
        self.mkpath(str(target))
        for notebook in notebooks:
            self.copy_file(str(notebook), str(target / notebook.name))


setup(
    package_dir={"": SRC},
    packages=find_packages(SRC, include=["attnlab_course", "attnlab_course.*"]),
    cmdclass={"build_py": build_py_with_solutions},
)
