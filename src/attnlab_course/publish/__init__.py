"""Publishing the course: offline reveal.js slides, a static website and the instructor guide, from the notebooks.

    python -m attnlab_course.publish slides [--out build/slides]   # one deck per notebook (make slides)
    python -m attnlab_course.publish site [--out build/site]       # every notebook, a landing page, the guide (make site)
    python -m attnlab_course.publish guide [--check]               # write docs/instructor-guide.md (or check it)

Modules: :mod:`.slideshow` (slide structure for a copy of a notebook), :mod:`.assets` (pinned npm packages),
:mod:`.build` (nbconvert), :mod:`.guide` (the instructor guide), :mod:`.hints` (checkers' hints, read from their source).
"""
