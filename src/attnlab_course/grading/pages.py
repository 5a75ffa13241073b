"""The HTML pages the grader writes (feedback per submission, the similarity report) share one page: its head, its
base style and its escaping.

A page loads nothing: no script, no link, no image, no font. Its Content-Security-Policy forbids all of them but the
page's own inline style, so even a mistake in escaping could not run anything. Everything a learner wrote or named goes
through Jinja2's autoescaping and :func:`shown`, which writes out invisible and direction-changing characters.
"""

from __future__ import annotations

import re

import jinja2

from .report import _escape, one_line

# every control character but newline and tab, line and paragraph separators, zero-width and bidirectional marks, and
# lone surrogates (a file name's undecodable bytes)
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{% block title %}{% endblock %}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1a1a1a; background: #ffffff;
       line-height: 1.5; margin: 0 auto; padding: 1rem 1.5rem; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { border: 1px solid #767676; padding: 0.35rem 0.75rem; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
{% block style %}{% endblock %}
</style>
</head>
<body>
{% block body %}{% endblock %}
</body>
</html>
"""


def shown(text) -> str:
    """``text`` with every invisible or direction-changing character written out as an escape (newlines and tabs
    kept); the template escapes the result for HTML."""
    return _INVISIBLE.sub(_escape, str(text))


def environment(**templates: str) -> jinja2.Environment:
    """Autoescaping Jinja2 with the page (``{% extends "page" %}``), ``templates`` by name, and the filters ``shown``
    and ``one_line`` (names on one line: a newline shown as backslash-n, like every invisible character)."""
    env = jinja2.Environment(loader=jinja2.DictLoader({"page": PAGE, **templates}), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["shown"] = shown
    env.filters["one_line"] = one_line
    return env
