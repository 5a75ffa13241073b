"""Did the learner write the exercise? Which ``attnlab`` code computes each answer, and whether an answer reaches it.

**The answering code is derived, not listed.** An exercise names the public functions it asks the learner to write
(``forbids`` of :func:`attnlab.exercises.exercise`). :func:`answering_code` takes every function and class defined at
the top level of the modules that implement them, public or private (``attnlab.softmax`` gives ``softmax``,
``softmax_inplace`` and ``mask_inplace``), then, from the call graph of the whole library read from its source,
everything in ``attnlab`` that uses one of them, transitively (``attention`` uses ``softmax``). Nothing is kept by
hand, so a new private helper is covered the day it is written.

**The decision reads the learner's source, on the judging side.** :func:`scan` reads the learner's exercise cells
(the grader holds them; a kernel can change nothing there) and finds the code the graded function can reach: the
function itself and, transitively, every top-level statement of the cells that binds a name it uses, plus every
statement that changes shared state (``x.y = ...``). In that code, any use of the answering code by name fails (by
attribute of ``attnlab``, ``from attnlab... import``, a bare name the notebook imported, ``getattr`` with a constant),
and so do the ways of reaching code that a reading cannot follow (``globals()``, ``exec``, ``sys.modules``,
``__code__``, ``importlib``, ...), and any touch of the checks' own machinery (``attnlab.exercises._agent``, its
tripwires). A self-test line after the function (an expression or ``assert`` that *calls* the reference, e.g.
``np.testing.assert_allclose(f(q, k, v), attnlab.attention(q, k, v))``) is not part of the answer and is allowed; a
line that hands the reference itself to something (``helpers.append(attnlab.softmax)``) is not.

The kernel's tripwires (:class:`._agent.Tripwires`, armed on the same derived code while the checker calls the
function) still report a call reached another way; switching them off changes nothing above.
"""

from __future__ import annotations

import ast
import functools
import pkgutil
from pathlib import Path

import attnlab

_LIBRARY_SKIP = ("attnlab.exercises",)
_DYNAMIC_CALLS = frozenset({"globals", "vars", "locals", "eval", "exec", "compile", "__import__", "setattr",
                            "delattr", "breakpoint"})
_DYNAMIC_ATTRS = frozenset({"__dict__", "__code__", "__globals__", "__closure__", "__wrapped__", "__builtins__",
                            "__func__", "__getattribute__", "__subclasses__", "__loader__", "__spec__", "modules",
                            "f_globals", "f_locals", "f_back", "gi_frame", "__reduce__", "__reduce_ex__"})
_DYNAMIC_MODULES = frozenset({"importlib", "ctypes", "pickle", "marshal", "gc", "inspect", "dill", "cloudpickle",
                              "runpy", "code", "codeop", "copyreg", "shelve", "builtins"})
_CHECK_MACHINERY = frozenset({"_agent", "_wire", "_protocol", "_judge", "_provenance", "Tripwires", "LocalAnswer",
                              "execute_call", "_REGISTRY", "_FORBIDS", "_SECRET", "_load_all"})


# --- the answering code, from the library's call graph ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _library_files() -> dict[str, Path]:
    """The library's modules and their source files (read, never imported: a self-check stays fast)."""
    root = Path(attnlab.__file__).parent
    files = {"attnlab": root / "__init__.py"}
    for info in pkgutil.iter_modules([str(root)], "attnlab."):
        if not info.name.startswith(_LIBRARY_SKIP) and not info.ispkg:
            files[info.name] = root / f"{info.name.split('.')[-1]}.py"
    return files


def _library_modules() -> dict[str, Path]:
    return _library_files()


def _module_tree(name: str):
    try:
        return ast.parse(_library_files()[name].read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _resolve_relative(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=1)
def _call_graph():
    """``(definitions, uses)``: every top-level ``(module, name)`` of the library, and what each one refers to."""
    definitions: set[tuple[str, str]] = set()
    uses: dict[tuple[str, str], set[tuple[str, str]]] = {}
    tables = {}
    for module in _library_modules():
        tree = _module_tree(module)
        if tree is None:
            continue
        is_package = module == "attnlab"
        names, modules = {}, {}  # local name -> (module, name); local name -> module
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions.add((module, node.name))
                names[node.name] = (module, node.name)
            elif isinstance(node, ast.ImportFrom):
                source = _resolve_relative(module, node, is_package)
                for alias in node.names:
                    local = alias.asname or alias.name
                    if f"{source}.{alias.name}" in _library_modules():
                        modules[local] = f"{source}.{alias.name}"
                    else:
                        names[local] = (source, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                        alias.name.split(".")[0]
        tables[module] = (tree, names, modules)
    for module, (tree, names, modules) in tables.items():
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            found = set()
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in names:
                    found.add(names[sub.id])
                elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in modules:
                    found.add((modules[sub.value.id], sub.attr))
            uses[(module, node.name)] = found

    def canonical(ref):  # a re-export (attnlab.softmax from attnlab/__init__) to where it is defined
        seen = set()
        while ref not in definitions and ref not in seen and ref[0] in tables:
            seen.add(ref)
            ref = tables[ref[0]][1].get(ref[1], ref)
        return ref

    return definitions, {k: {canonical(r) for r in v} for k, v in uses.items()}, canonical


@functools.lru_cache(maxsize=None)
def answering_code(forbids: tuple[str, ...]) -> dict[str, str]:
    """The ``attnlab`` code that computes the answer of an exercise that forbids ``forbids``: short name -> dotted
    name (``attnlab.causal_mask`` for what the package exports, else ``attnlab.module.name``), public and private."""
    if not forbids:
        return {}
    definitions, uses, canonical = _call_graph()
    seeds = set()
    for dotted in forbids:
        module, _, name = dotted.rpartition(".")
        seeds.add(canonical((module, name))[0])  # the module that implements it
    answer = {d for d in definitions if d[0] in seeds}
    changed = True
    while changed:  # everything that uses the answering code answers too
        changed = False
        for caller, callees in uses.items():
            if caller not in answer and callees & answer:
                answer.add(caller)
                changed = True
    named = {}
    for module, name in sorted(answer):
        is_export = canonical(("attnlab", name)) == (module, name)  # what ``import attnlab`` offers by this name
        named[name] = f"attnlab.{name}" if is_export else f"{module}.{name}"
    return named


# --- what the graded function can reach, in the learner's source -----------------------------------------------------


def _bound(node) -> set[str]:
    """Names a top-level statement binds (assignments, definitions, imports, loop and with targets, at any depth)."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            names.update(sub.names)
        elif isinstance(sub, ast.arg):
            names.add(sub.arg)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            names.add(sub.name)
    return names


def _loaded(node) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)}


def _changes_shared_state(node) -> bool:
    """An assignment to an attribute or item (``f.__defaults__ = ...``, ``table[0] = ...``), or a deletion, made when
    the statement runs (not in the body of a function it defines, which counts only if the function is reachable)."""
    pending = [node]
    while pending:
        sub = pending.pop()
        if isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(sub.decorator_list if not isinstance(sub, ast.Lambda) else [])
            continue
        pending.extend(ast.iter_child_nodes(sub))
    return False


def _is_self_test(node) -> bool:
    return isinstance(node, (ast.Expr, ast.Assert))


def _parse(source: str):
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class _Finding(Exception):
    def __init__(self, kind: str, what: str):
        super().__init__(what)
        self.kind, self.what = kind, what


def _attnlab_aliases(statements) -> tuple[set[str], dict[str, str]]:
    """Names the cells bind to attnlab or its modules, and names they import from it (local name -> its name)."""
    aliases, imported = {"attnlab"}, {}
    for node in statements:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                aliases.update((a.asname or a.name).split(".")[0] for a in sub.names
                               if a.name.split(".")[0] == "attnlab")
            elif isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] == "attnlab":
                for a in sub.names:
                    aliases.add(a.asname or a.name)
                    imported[a.asname or a.name] = a.name
    return aliases, imported


def _inspect(node, answer: dict[str, str], own: set[str], aliases: tuple, *, self_test: bool) -> None:
    """Raise :class:`_Finding` for a use of the answering code, of the checks' machinery, or of dynamic access."""
    aliases, imported = aliases
    callees = {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Import, ast.ImportFrom)):
            module = sub.module or "" if isinstance(sub, ast.ImportFrom) else ""
            for alias in sub.names:
                full = f"{module}.{alias.name}" if module else alias.name
                parts = set(full.split("."))
                if parts & _CHECK_MACHINERY:
                    raise _Finding("machinery", full)
                if full.split(".")[0] in _DYNAMIC_MODULES or module.split(".")[0] in _DYNAMIC_MODULES:
                    raise _Finding("dynamic", f"import {full}")
                if module.split(".")[0] == "attnlab" and not self_test:
                    if alias.name == "*":
                        raise _Finding("dynamic", f"from {module} import *")
                    if alias.name in answer:
                        raise _Finding("reference", answer[alias.name])
        elif isinstance(sub, ast.Attribute):
            if sub.attr in _CHECK_MACHINERY:
                raise _Finding("machinery", sub.attr)
            if sub.attr in _DYNAMIC_ATTRS:
                raise _Finding("dynamic", sub.attr)
            root = sub.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if sub.attr in answer and isinstance(root, ast.Name) and (root.id in aliases or root.id not in own):
                if not (self_test and id(sub) in callees):
                    raise _Finding("reference", answer[sub.attr])
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            if sub.id == "__builtins__":
                raise _Finding("dynamic", sub.id)
            name = imported.get(sub.id, sub.id if sub.id not in own else None)
            if name in answer and not (self_test and id(sub) in callees):
                raise _Finding("reference", answer[name])
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id not in own:
            if sub.func.id in _DYNAMIC_CALLS:
                raise _Finding("dynamic", f"{sub.func.id}()")
            if sub.func.id == "getattr" and len(sub.args) >= 2:
                name = sub.args[1]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    raise _Finding("dynamic", "getattr with a computed name")
                if name.value in _CHECK_MACHINERY:
                    raise _Finding("machinery", name.value)
                if name.value in answer and not self_test:
                    raise _Finding("reference", answer[name.value])


def scan(sources, graded: str | None, forbids: tuple[str, ...]) -> tuple[str, str] | None:
    """How the learner's exercise cells (``sources``, in notebook order) fail to write the exercise themselves:
    ``(kind, what)`` with kind ``"reference"`` (``what`` is the dotted name of answering code), ``"machinery"`` or
    ``"dynamic"``; None when they do write it.

    ``graded`` is the name the check cell passes to ``check`` (None: every statement counts but self-test lines).
    """
    statements = []
    for source in sources:
        tree = _parse(source)
        if tree is not None:
            statements.extend(tree.body)
    answer = answering_code(tuple(forbids))
    own = set().union(*(_bound(node) for node in statements)) if statements else set()
    aliases = _attnlab_aliases(statements)
    reachable = {graded} if graded else None
    included: list = []
    pending = [n for n in statements if not _is_self_test(n)]
    while True:
        added = [n for n in pending if reachable is None or _changes_shared_state(n) or _bound(n) & reachable]
        if not added:
            break
        pending = [n for n in pending if all(n is not a for a in added)]
        included += added
        if reachable is not None:
            for node in added:
                reachable |= _loaded(node)
    try:
        for node in included:
            _inspect(node, answer, own, aliases, self_test=False)
        for node in statements:
            if _is_self_test(node):
                _inspect(node, answer, own, aliases, self_test=True)
    except _Finding as found:
        return found.kind, found.what
    return None


def message(exercise_id: str, finding: tuple[str, str]) -> str:
    """The learner's failure message for a :func:`scan` finding."""
    from ._judge import forbidden_message

    kind, what = finding
    if kind == "reference":
        return forbidden_message(exercise_id, what)
    if kind == "machinery":
        return (f"your exercise cell reaches into the checks' own code ({what}); exercise {exercise_id} is judged "
                "outside your kernel, so this can only make the check fail. Remove it.")
    return (f"exercise {exercise_id} asks you to write this yourself, and your exercise cell uses {what}, a way of "
            "reaching code that the grader cannot follow, so it cannot tell whether you did. Write it with plain "
            "names and numpy.")
