"""The mistakes each exercise's checker diagnoses, read from the checker's source, so the guide never drifts.

A checker (``@exercise("N.k")`` in ``attnlab/exercises/nbNN.py``) names a mistake in the ``hint`` of a
``fail(what, expected, got, hint)`` call. The hint is a string, an f-string, a name assigned a string in the same
function (``hint = "..."`` in each branch), a module constant, or a call whose string arguments are the hint (e.g.
``_hint(found, "fallback")``); module-level dicts whose keys are mistakes (``_CACHE_MISTAKES``) name mistakes too.
The search follows the helper functions that the checker calls, the module's own and the package's shared ones.
An f-string's placeholders are shown as their variable's name (``{offset}``) or as ``…`` for an expression.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

EXERCISES = Path(importlib.util.find_spec("attnlab.exercises").origin).parent


def _text(node: ast.AST, module: dict[str, ast.AST], local: dict[str, list[ast.AST]], depth: int = 0) -> list[str]:
    """The strings an expression can evaluate to (best effort; empty when it is not made of strings)."""
    if depth > 4:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                inner = value.value
                parts.append(f"{{{inner.id}}}" if isinstance(inner, ast.Name) else "…")
        return ["".join(parts)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, module, local, depth + 1), _text(node.right, module, local, depth + 1)
        return [a + b for a in left or ["…"] for b in right or ["…"]] if (left or right) else []
    if isinstance(node, ast.IfExp):
        return _text(node.body, module, local, depth + 1) + _text(node.orelse, module, local, depth + 1)
    if isinstance(node, ast.Name):
        if node.id in local:
            return [t for value in local[node.id] for t in _text(value, module, local, depth + 1)]
        if node.id in module:
            return _text(module[node.id], module, {}, depth + 1)
        return []
    if isinstance(node, ast.Call):
        return [t for arg in node.args for t in _text(arg, module, local, depth + 1)]
    return []


def _assignments(fn: ast.FunctionDef) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
    return found


def _hint_node(call: ast.Call) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == "hint":
            return keyword.value
    return call.args[3] if len(call.args) > 3 else None


def _exercise_id(fn: ast.FunctionDef) -> str | None:
    for deco in fn.decorator_list:
        if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "exercise" and deco.args
                and isinstance(deco.args[0], ast.Constant)):
            return str(deco.args[0].value)
    return None


def _clean(text: str) -> str:
    return " ".join(text.split()).strip()


def module_hints(path: Path) -> dict[str, list[str]]:
    """``{exercise id: [hint, ...]}`` for the checkers of one ``nbNN.py``, in source order, without repeats."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    shared = Path(path).with_name("__init__.py")  # helpers every checker module shares, e.g. float_array
    shared_tree = ast.parse(shared.read_text(encoding="utf-8")) if shared.exists() else ast.Module(body=[])
    functions = {n.name: n for body in (shared_tree.body, tree.body) for n in body if isinstance(n, ast.FunctionDef)
                 and n.name != "fail"}
    constants = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
    mistake_dicts = {name: value for name, value in constants.items() if isinstance(value, ast.Dict)
                     and value.keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                            for k in value.keys)}
    out: dict[str, list[str]] = {}
    for fn in functions.values():
        exercise_id = _exercise_id(fn)
        if exercise_id is None:
            continue
        hints: list[str] = []
        seen_fns, todo = set(), [fn]
        while todo:  # the checker and the module's helpers it calls, transitively
            current = todo.pop(0)
            if current.name in seen_fns:
                continue
            seen_fns.add(current.name)
            local = _assignments(current)
            for node in ast.walk(current):
                if isinstance(node, ast.Name) and node.id in mistake_dicts:
                    hints += ["you " + k.value for k in mistake_dicts[node.id].keys]
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", None)
                if name == "fail":
                    hint = _hint_node(node)
                    if hint is not None:
                        hints += _text(hint, constants, local)
                elif name in functions:
                    todo.append(functions[name])
                for arg in node.args:  # helpers passed by name, e.g. a mistake table
                    if isinstance(arg, ast.Name) and arg.id in functions:
                        todo.append(functions[arg.id])
        unique = []
        for hint in map(_clean, hints):
            if hint and hint not in unique and not re.fullmatch(r"(you )?…\.?", hint):
                unique.append(hint)
        out[exercise_id] = unique
    return out


def all_hints(folder: Path = EXERCISES) -> dict[str, list[str]]:
    """``{exercise id: [hint, ...]}`` for every checker module ``nbNN.py`` in ``folder``."""
    found: dict[str, list[str]] = {}
    for path in sorted(Path(folder).glob("nb[0-9][0-9].py")):
        found.update(module_hints(path))
    return dict(sorted(found.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))
