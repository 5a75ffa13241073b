"""The one build step pyproject.toml cannot declare: the solution notebooks go into the wheel.

``notebooks/solutions/NN_topic.ipynb`` is copied to ``attnlab/course/solutions/NN_topic.ipynb`` in the wheel, where
``attnlab-check`` finds the reference notebooks when attnlab is installed from it. The notebooks are copied at build
time (the sdist carries them, see MANIFEST.in), so there is never a second committed copy. An editable install
(``pip install -e .``, what ``make install`` does) copies nothing: the grader reads ``notebooks/solutions`` directly.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOLUTIONS = Path(__file__).resolve().parent / "notebooks" / "solutions"


class build_py_with_solutions(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        notebooks = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
        if not notebooks:
            raise SystemExit(f"no solution notebooks in {SOLUTIONS}: the wheel would have no reference notebooks")
        target = Path(self.build_lib, "attnlab", "course", "solutions")
        self.mkpath(str(target))
        for notebook in notebooks:
            self.copy_file(str(notebook), str(target / notebook.name))


setup(cmdclass={"build_py": build_py_with_solutions})
