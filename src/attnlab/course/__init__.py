"""Course tooling, apart from the attention library that learners import.

* :mod:`attnlab.course.authoring`: learner notebooks generated from the solution notebooks; re-execution in place.
* :mod:`attnlab.course.grading`: ``attnlab-check``, which grades a learner's exercises through nbval.

Nothing in :mod:`attnlab` itself imports this package.
"""
