"""Course tooling, a package of its own beside the attention library that learners import (``attnlab``).

* :mod:`attnlab_course.paths`: where the repository, the notebooks and the solution notebooks are (the one module
  that knows);
* :mod:`attnlab_course.authoring`: learner notebooks generated from the solution notebooks; re-execution in place;
* :mod:`attnlab_course.timing`: the time estimate in each notebook's header;
* :mod:`attnlab_course.colab`: the Colab set-up cell of each notebook;
* :mod:`attnlab_course.publish`: slides, the website and the instructor guide;
* :mod:`attnlab_course.grading`: ``attnlab-check``, which grades a learner's exercises in a sandbox.

It is the ``attnlab-course`` distribution (``course/pyproject.toml``), which depends on ``attnlab``; the ``attnlab``
distribution holds the library and the exercise checkers only, and nothing in it imports this package.
"""
