"""Which of the notebook's own cells one grading needs: a dependency analysis of the notebook nbval runs.

A grading runs the solution notebook's own cells, then the learner's exercise cells and the check cells. Most of the
own cells draw figures, build explorers or time things, and no exercise reads what they make. :func:`slice_cells`
keeps the cells a grading needs and drops the others:

* every exercise cell (the learner's) and every check cell is always kept, and so is every cell after the first
  exercise cell (it may run the learner's code);
* an own cell is dropped only when the analysis shows that no kept cell after it reads anything it binds, deletes or
  may change, and that it changes no state outside the notebook's names that a kept cell may read; when in doubt it
  is kept;
* in a kept own cell before the exercises, an import is left out when no later kept cell reads its name or its
  package, nor plotting state for a plotting package (:func:`slim_imports`): pyplot and ipywidgets, which only the
  figures and explorers use, were a third of a grading's kernel time.

The analysis reads each cell with Python's :mod:`ast` and :mod:`symtable` (after IPython's own transformation of
magics into Python), and works on *names* of the notebook's global namespace:

* **reads**: every global name the cell loads, in its own statements and in the functions, lambdas, classes and
  comprehensions it defines (whatever scope they run in later);
* **binds**: the global names it assigns, imports, defines, deletes or declares ``global`` and assigns;
* **mutates**: the global names whose objects it may change: the root of every attribute or item it stores or
  deletes (``x.a = ..``, ``x[i] += ..``), of every method it calls (``rng.normal()`` changes ``rng``), and of every
  argument it passes to a call (the callee may change it, e.g. ``np.copyto(dst, src)``);
* names that may hold the same object are one **alias class**: a binding joins its targets with every name of its
  value (``w = weights`` or ``x = f(weights)``); a change to one name changes the class;
* **world effects**: state outside the notebook's names that a call may change. A call through an imported module
  is looked up in :data:`CALLS` (numpy keeps no state but its documented global configuration; plotting calls
  change only the plotting state; anything not listed may change anything, ``"*"``); a call of a notebook function
  has the effects of its body (transitively), and a call of any object the effects of the calls its value was made
  with. A callable passed as an argument counts as called.

What makes a cell **opaque** (the analysis cannot see through it): a magic other than ``%matplotlib``, a syntax
error, a star-import, ``eval``/``exec``/``globals()``/``locals()``/``vars()``/``getattr`` with a computed name,
``__dunder__`` attributes, frames, IPython's history names (``_``, ``Out``, ``_i3``...), and modules that reach the
namespace (``sys.modules``, ``inspect``, ``builtins``, ``__main__``, ``gc``, ``ctypes``, ``importlib``). An opaque
own cell is kept with every cell before it; an opaque exercise cell means the grading runs every cell.

The learner controls the exercise cells: they can only make more cells kept (a name read or an opaque cell), never
fewer; the check cells and the trusted side's inputs are the same as in a full run.
"""

from __future__ import annotations

import ast
import copy
import re
import symtable
import threading
from dataclasses import dataclass, field
from functools import lru_cache


__all__ = ["AST_LOCK", "CALLS", "CellFacts", "analyse", "slice_cells"]

AST_LOCK = threading.RLock()
"""Held while Python builds syntax trees or symbol tables. A batch grades submissions in threads, and CPython 3.11's
AST constructor keeps its recursion depth in shared state: two threads parsing at once can fail with "SystemError: AST
constructor recursion depth mismatch" (python/cpython#106905)."""

ANY = "*"  # a world effect that may change anything
PLOT = "plotting"  # matplotlib's and the widgets' state: figures, rcParams, widget registry

# What a call through an imported module may change, by the longest matching prefix of its dotted path. None: nothing
# outside its arguments. "with": nothing when it is the context manager of a `with` (it restores what it changes on
# exit), anything otherwise. A module not listed may change anything.
CALLS: dict[str, str | None] = {
    # numpy's state is its global configuration (https://numpy.org/doc/stable/reference/global_state.html): print
    # options, floating-point error handling, buffer size, the legacy global random state
    "numpy": None,
    "numpy.set_printoptions": ANY, "numpy.set_string_function": ANY, "numpy.seterr": ANY, "numpy.seterrcall": ANY,
    "numpy.setbufsize": ANY, "numpy.printoptions": "with", "numpy.errstate": "with", "numpy.lib": ANY,
    "numpy.save": ANY, "numpy.savez": ANY, "numpy.savez_compressed": ANY, "numpy.savetxt": ANY, "numpy.memmap": ANY,
    "numpy.load": ANY, "numpy.loadtxt": ANY, "numpy.genfromtxt": ANY, "numpy.fromfile": ANY,
    "matplotlib.pyplot.savefig": ANY, "matplotlib.pyplot.imsave": ANY, "matplotlib.pyplot.imread": ANY,
    "numpy.core": ANY, "numpy._core": ANY,
    "numpy.random": ANY, "numpy.random.default_rng": None, "numpy.random.Generator": None,
    "numpy.random.SeedSequence": None, "numpy.random.PCG64": None, "numpy.random.Philox": None,
    "numpy.random.SFC64": None, "numpy.random.MT19937": None,
    # attnlab: plain functions on arrays, but its plotting and widgets, its checkers and its thread limit
    "attnlab": None, "attnlab.plot": PLOT, "attnlab.widgets": PLOT, "attnlab.exercises": ANY,
    "attnlab.limit_threads": "with", "attnlab._parallel": ANY,
    "matplotlib": PLOT, "ipywidgets": PLOT, "IPython.display": PLOT,
    "warnings.catch_warnings": "with",
    # modules whose state only code that names them can see
    "time": None, "math": None, "functools": None, "itertools": None, "operator": None, "statistics": None,
    "fractions": None, "textwrap": None, "string": None, "collections": None, "dataclasses": None,
    "tracemalloc": "tracemalloc", "ml_dtypes": None,
}
# world locations only code that names their module reads (the others, and ANY, every kept cell may read)
PRIVATE = {"numpy": None, "attnlab": None, PLOT: ("matplotlib", "ipywidgets", "IPython.display", "attnlab.plot",
                                                  "attnlab.widgets"), "tracemalloc": ("tracemalloc",)}
PURE_BUILTINS = frozenset(
    "abs all any ascii bin bool bytearray bytes callable chr complex dict divmod enumerate filter float format "
    "frozenset hash hex id int isinstance issubclass iter len list map max min next object oct ord pow print "
    "property range repr reversed round set slice sorted staticmethod classmethod str sum super tuple type zip "
    "ValueError TypeError KeyError IndexError RuntimeError AssertionError NotImplementedError ZeroDivisionError "
    "ArithmeticError Exception StopIteration hasattr".split())
OPAQUE_NAMES = frozenset("eval exec compile globals locals vars dir __import__ setattr delattr breakpoint input "
                         "get_ipython __builtins__ In Out exit quit display".split())
# attributes that reach a namespace, a frame or code (``f.__globals__``, ``type(x).__dict__``...)
OPAQUE_ATTRIBUTES = frozenset("__dict__ __globals__ __builtins__ __code__ __closure__ __subclasses__ "
                              "__getattribute__ __getattr__ __setattr__ __delattr__ __import__ __loader__ __spec__ "
                              "__reduce__ __reduce_ex__ __self__ __func__ __wrapped__ __defaults__ __kwdefaults__ "
                              "__init_subclass__ __base__ __bases__ __mro__ __objclass__ __traceback__".split())
_HISTORY = re.compile(r"^(_+|_i+|_i?\d+|_[oid]h)$")  # IPython's output history: _, __, _3, _i3, _oh, _ih, _dh
OPAQUE_MODULES = ("sys", "builtins", "__main__", "inspect", "gc", "ctypes", "importlib", "IPython", "ipykernel",
                  "types", "traceback", "runpy", "pickle", "code", "codeop", "timeit")
SAFE_SYS = frozenset({"platform", "version_info", "version", "maxsize", "float_info", "byteorder", "stdout"})
_FRAME_ATTRIBUTE = re.compile(r"^(f|tb|gi|cr|ag)_[a-z]+$")
MAGICS = {"matplotlib": PLOT}
ARGUMENT_WRITERS = frozenset("copyto put place putmask fill_diagonal put_along_axis at shuffle".split())
# methods that write files (on objects the table calls pure: arrays, figures), which any cell may then read
FILE_METHODS = frozenset("savefig tofile dump write writelines write_text write_bytes savez savetxt to_csv to_json "
                         "mkdir touch unlink rmdir symlink_to".split())  # line magics with a known effect; any other magic makes a cell opaque


@dataclass
class CellFacts:
    """What one cell reads and changes (see the module docstring); ``opaque`` says why it cannot be seen through."""

    opaque: str = ""
    reads: set = field(default_factory=set)
    binds: set = field(default_factory=set)
    mutates: set = field(default_factory=set)
    effects: set = field(default_factory=set)  # world locations it may change
    world_reads: set = field(default_factory=set)  # private world locations it reads
    calls: set = field(default_factory=set)  # global names it may call (their effects are resolved across cells)
    bindings: list = field(default_factory=list)  # (targets, names in the value, effects of the value, names called)
    functions: dict = field(default_factory=dict)  # name -> (mutates, binds, effects, calls) of a def or class body


# --- one cell --------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _python(source: str) -> str:
    """The cell as Python: IPython's own transformation (magics become ``get_ipython().run_line_magic(...)``)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _root(node):
    """The Name at the root of an attribute/subscript/call chain (``a`` of ``a.b[0].c``), else None."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in PURE_BUILTINS:
                return None  # a new object
            node = node.func
        else:
            return node.id if isinstance(node, ast.Name) else None


def _dotted(node) -> list[str] | None:
    """``["np", "random", "default_rng"]`` for ``np.random.default_rng``; None when not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _scope_globals(table) -> tuple[set, set, set]:
    """Global names this symbol table (and the scopes inside it) reads, binds, and could name at all."""
    reads, binds, names = set(), set(), set()
    module = table.get_type() == "module"
    for sym in table.get_symbols():
        name = sym.get_name()
        if module or sym.is_global():
            names.add(name)
            if sym.is_referenced():
                reads.add(name)
            if sym.is_assigned() or sym.is_imported() or (module and sym.is_namespace()):
                binds.add(name)
    for child in table.get_children():
        r, b, n = _scope_globals(child)
        reads |= r
        binds |= b
        names |= n
    return reads, binds, names


class _Visitor(ast.NodeVisitor):
    """Collects mutations, calls, world effects and reasons for opacity in a statement list."""

    def __init__(self, modules: dict[str, str], names: set, with_items: set, skip_bodies: bool = False):
        self.modules, self.names, self.with_items, self.skip_bodies = modules, names, with_items, skip_bodies
        self.mutates, self.effects, self.calls, self.called_locals = set(), set(), set(), False
        self.world_reads, self.opaque, self.catching = set(), "", 0
        self.local_mutation = False  # a local (a comprehension's, a lambda's, a parameter) may share a global's object

    def visit_FunctionDef(self, node):
        if not self.skip_bodies:  # a body runs when the function is called: see CellFacts.functions
            self.generic_visit(node)
            return
        for part in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults, node.returns]:
            if part is not None:
                self.visit(part)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_With(self, node):
        catching = any(_dotted(item.context_expr.func) and self.modules.get(
            _dotted(item.context_expr.func)[0], "").startswith("warnings") for item in node.items
            if isinstance(item.context_expr, ast.Call))
        self.catching += catching
        self.generic_visit(node)
        self.catching -= catching

    visit_AsyncWith = visit_With

    def _opaque(self, why: str) -> None:
        self.opaque = self.opaque or why

    def _mutate(self, node) -> None:
        root = _root(node)
        if root is not None and root in self.names:
            self.mutates.add(root)
        elif root is not None and root not in self.modules:
            self.local_mutation = True

    def visit_Name(self, node):
        if node.id in OPAQUE_NAMES or (_HISTORY.match(node.id) and isinstance(node.ctx, ast.Load)):
            self._opaque(f"uses {node.id}")
        module = self.modules.get(node.id)
        if module is not None:
            for location, prefixes in PRIVATE.items():
                if prefixes and any(module == p or module.startswith(p + ".") for p in prefixes):
                    self.world_reads.add(location)
            if module.split(".")[0] in OPAQUE_MODULES and node.id != "sys":
                self._opaque(f"uses the module {module}")

    def _store(self, node) -> None:
        """An attribute or item stored or deleted (``x.a = ..``, ``x[i] += ..``): a module's changes its state."""
        root = _root(node)
        if root is not None and root in self.modules:
            effect = _module_effect(self.modules[root].split("."), False)
            self.effects.add(effect if effect == PLOT else ANY)  # e.g. plt.rcParams[...], np.x = .., os.environ[..]
        else:
            self._mutate(node)

    def visit_Attribute(self, node):
        attr = node.attr
        if attr in OPAQUE_ATTRIBUTES or _FRAME_ATTRIBUTE.match(attr):
            self._opaque(f"uses the attribute {attr}")
        path = _dotted(node)
        if path and self.modules.get(path[0]) == "sys" and (len(path) < 2 or path[1] not in SAFE_SYS):
            self._opaque(f"uses sys.{path[1]}")
        if path and self.modules.get(path[0], "").startswith("attnlab") and set(path[1:]) & {"plot", "widgets"}:
            self.world_reads.add(PLOT)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._store(node)
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._store(node)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._store(node.target)
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if any(a.name == "*" for a in node.names):
            self._opaque("a star-import")
        self._import(node.module or "")

    def visit_Import(self, node):
        for alias in node.names:
            self._import(alias.name)

    def _import(self, module: str) -> None:
        if module.split(".")[0] in OPAQUE_MODULES and module != "sys":
            self._opaque(f"imports {module}")
        for location, prefixes in PRIVATE.items():
            if prefixes and any(module == p or module.startswith(p + ".") for p in prefixes):
                self.world_reads.add(location)
        effect = _module_effect(module.split("."), False)  # importing runs the module's code
        if effect:
            self.effects.add(effect)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr" and not (
                len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            self._opaque("getattr with a computed name")
        magic = _magic(node)
        if magic is not None:
            if magic in MAGICS:
                self.effects.add(MAGICS[magic])
            else:
                self._opaque(f"the magic %{magic}")
            return
        path, effect = _dotted(func), None
        if path and path[0] in self.modules:  # a call through an imported module
            full = self.modules[path[0]].split(".") + path[1:]
            effect = _module_effect(full, id(node) in self.with_items)
            if full[0] == "warnings" and self.catching:
                effect = None  # inside `with warnings.catch_warnings()`, which restores the filters on exit
            if effect:
                self.effects.add(effect)
        elif isinstance(func, ast.Name):
            if func.id in self.names or func.id in PURE_BUILTINS:
                self.calls.add(func.id)
            elif func.id not in PURE_BUILTINS:
                self.called_locals = True  # a parameter or local: the caller's arguments count as called
        else:
            root = _root(func)
            if isinstance(func, ast.Attribute) and func.attr in FILE_METHODS:
                self.effects.add(ANY)  # writes a file, which any cell may read
            if root is not None and root in self.names:
                self.calls.add(root)  # a method of a notebook object: the effects of how it was made
            self._mutate(func)
        builtin = isinstance(func, ast.Name) and func.id in PURE_BUILTINS and func.id not in ("next", "print")
        # numpy's and attnlab's functions return new arrays and leave their arguments alone, but `out=`, the few that
        # write into an argument, and ufuncs' `.at`; plotting draws what it is given without changing it: what it
        # changes (the figures and axes it is given among them) is the plotting state, PLOT, which a kept cell
        # reading a plotting object needs
        keeps_args = path and path[0] in self.modules and (effect == PLOT or (effect is None and not (
            path[-1] in ARGUMENT_WRITERS or path[-1].endswith("_inplace"))))
        for keyword in node.keywords:
            if keyword.arg == "out" or keyword.arg is None:
                self._mutate(keyword.value)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if not builtin and not keeps_args:
                self._mutate(arg)  # the callee may change what it is given...
            root = _root(arg)
            if root is not None and root in self.names:
                self.calls.add(root)  # ...and call it
            elif root is not None and root in self.modules:
                arg_path = _dotted(arg.value if isinstance(arg, ast.Starred) else arg)
                if arg_path:
                    effect = _module_effect(self.modules[root].split(".") + arg_path[1:], False)
                    if effect:
                        self.effects.add(effect)
        self.generic_visit(node)


def _magic(node: ast.Call) -> str | None:
    """The magic's name for ``get_ipython().run_line_magic('name', ...)`` (and run_cell_magic, system, ...)."""
    func = node.func
    if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name) and func.value.func.id == "get_ipython"):
        if func.attr in ("run_line_magic", "run_cell_magic") and node.args and isinstance(node.args[0], ast.Constant):
            return str(node.args[0].value)
        return func.attr
    return None


def _module_effect(path: list[str], in_with: bool) -> str | None:
    for n in range(len(path), 0, -1):
        key = ".".join(path[:n])
        if key in CALLS:
            effect = CALLS[key]
            if effect == "with":
                return None if in_with else ANY
            return effect
    return ANY


def _with_items(tree) -> set:
    return {id(item.context_expr) for node in ast.walk(tree) if isinstance(node, (ast.With, ast.AsyncWith))
            for item in node.items}


def _value_names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _target_names(target) -> set:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


@lru_cache(maxsize=4096)
def analyse(source: str, modules: tuple = ()) -> CellFacts:
    """The :class:`CellFacts` of one cell. ``modules`` maps names to the modules the notebook imported them from
    (as a tuple of pairs); the cell's own imports are added."""
    facts = CellFacts()
    try:
        code = _python(source)
        with AST_LOCK:
            tree = ast.parse(code)
            table = symtable.symtable(code, "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        facts.opaque = f"cannot be parsed ({type(exc).__name__})"
        return facts
    known = dict(modules) | imported_modules(tree)
    facts.reads, facts.binds, names = _scope_globals(table)
    facts.reads -= _imported_first(tree)
    names |= set(known)
    facts.binds |= {t for node in ast.walk(tree) if isinstance(node, ast.Delete) for tg in node.targets
                    for t in _target_names(tg) if isinstance(tg, ast.Name)}
    visitor = _Visitor(known, names, _with_items(tree), skip_bodies=True)
    visitor.visit(tree)
    facts.opaque = visitor.opaque
    facts.mutates = visitor.mutates - set(known)
    if visitor.local_mutation:  # e.g. `[a.sort() for a in arrays]`: any name the cell reads may share the object
        facts.mutates |= facts.reads - set(known)
    facts.effects, facts.world_reads = visitor.effects, visitor.world_reads
    facts.calls = visitor.calls - set(known)
    for node in ast.walk(tree):  # function bodies: their opacity counts where they are defined
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = _Visitor(known, names, set())
            inner.generic_visit(node)
            facts.opaque = facts.opaque or inner.opaque
            facts.world_reads |= inner.world_reads
    if visitor.called_locals:
        facts.effects.add("calls its arguments")  # resolved at the call sites: see _resolve
    imports_only = set(dict(modules))
    for node in tree.body:
        _bindings(node, facts, known, names, imports_only)
    for walrus in (n for n in ast.walk(tree) if isinstance(n, ast.NamedExpr)):
        _binding(facts, {walrus.target.id}, walrus.value, known, names)
    return facts


def _imported_first(tree) -> set:
    """Names the cell imports in its leading imports and reads only after them, at its top level (not in a function
    or lambda, which runs later, when a later cell may have rebound the name): those reads see the cell's own import,
    not an earlier cell. A check cell begins ``from attnlab.exercises import check``: a learner who rebinds ``check``
    does not make every check cell read the notebook's first cell."""
    leading = set()
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            break
        leading |= {b[0] for b in (_import_binding(node, alias) for alias in node.names) if b is not None}
    later = {n.id for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
             for n in ast.walk(node) if isinstance(n, ast.Name)}
    return leading - later


def _bindings(node, facts: CellFacts, known: dict, names: set, imports_only: set) -> None:
    """The alias bindings and function bodies of one top-level statement (and of statements nested in it).
    ``imports_only``: the names the notebook binds by imports alone (a function's reads leave out only those)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        visitor = _Visitor(known, names, _with_items(node))
        for part in node.body:
            visitor.visit(part)
        own = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        effects = set(visitor.effects) | ({"calls its arguments"} if visitor.called_locals else set())
        reads = (_value_names(node) & names) - imports_only
        mutates = visitor.mutates - set(known) | (reads if visitor.local_mutation else set())
        facts.functions[node.name] = (mutates, own & facts.binds, effects, visitor.calls - set(known), reads)
        for deco in getattr(node, "decorator_list", []):  # a decorator may wrap the function in anything
            facts.bindings.append(({node.name}, _value_names(deco) & names, {ANY}, set()))
        return
    targets, value = set(), None
    if isinstance(node, ast.Assign):
        targets, value = set().union(*(_target_names(t) for t in node.targets)), node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets, value = _target_names(node.target), node.value
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets, value = _target_names(node.target), node.iter
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            if item.optional_vars is not None:
                _binding(facts, _target_names(item.optional_vars), item.context_expr, known, names)
    if targets and value is not None:
        _binding(facts, targets & names, value, known, names)
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            _bindings(child, facts, known, names, imports_only)


def _binding(facts: CellFacts, targets: set, value, known: dict, names: set) -> None:
    """One binding: its targets, the names in its value (they may share objects), and how the value is made (the
    effects of calling a method of what it binds are those of the calls that made it)."""
    visitor = _Visitor(known, names, set())
    visitor.visit(value)
    effects = set(visitor.effects) | ({ANY} if visitor.called_locals else set())
    facts.bindings.append((targets, _value_names(value) & names, effects, visitor.calls - set(known)))


def _import_binding(node, alias) -> tuple[str, str] | None:
    """The name one alias of an import binds, and the dotted module (or module member) it names; None for a relative
    or star import."""
    if isinstance(node, ast.Import):
        top = alias.name.split(".")[0]
        return (alias.asname, alias.name) if alias.asname else (top, top)
    if node.module and not node.level and alias.name != "*":
        return alias.asname or alias.name, f"{node.module}.{alias.name}"
    return None


def imported_modules(tree) -> dict[str, str]:
    """Names bound by the imports of ``tree``, and the dotted module (or module member) each names."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(b for b in (_import_binding(node, alias) for alias in node.names) if b is not None)
    return found


# --- the notebook ----------------------------------------------------------------------------------------------------


class _Aliases:
    """Union-find over names: names that may hold the same object (see the module docstring)."""

    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        self.parent.setdefault(name, name)
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, names) -> None:
        names = list(names)
        for other in names[1:]:
            self.parent[self.find(other)] = self.find(names[0])

    def classes(self, names) -> set:
        return {self.find(n) for n in names}


@lru_cache(maxsize=4096)
def _parse(source: str):
    try:
        code = _python(source)
        with AST_LOCK:
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def notebook_modules(trees) -> dict[str, str]:
    """The names the notebook binds to modules (or module members) by imports only: a name it also binds otherwise
    (``np = ...``, ``def plot``, a loop variable) is a variable, whose calls may do anything."""
    modules, other = {}, set()
    for tree in trees:
        if tree is None:
            continue
        modules.update(imported_modules(tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                other.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                other.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                other.update(node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                other.add(node.name)
    return {name: module for name, module in modules.items() if name not in other}


def slice_cells(sources: list[str], own: list[bool], slim: dict | None = None) -> tuple[list[bool], dict[int, str]]:
    """Which cells to run, in order: ``sources`` are the grading notebook's code cells, ``own[i]`` says whether cell
    ``i`` is one of the notebook's own (else an exercise or check cell, always kept). Returns ``keep`` and, for every
    kept own cell, why (for the record and the tests). When ``slim`` is a dict, it receives the source to run instead
    of each kept own cell that has imports no later cell needs (:func:`slim_imports`)."""
    n = len(sources)
    first_learner = next((i for i in range(n) if not own[i]), n)
    modules = notebook_modules(_parse(source) for source in sources)
    key = tuple(sorted(modules.items()))
    facts = [analyse(source, key) for source in sources]
    for i in range(n):
        if not own[i] and facts[i].opaque:
            return [True] * n, {j: f"the exercise cell {i} {facts[i].opaque}: every cell runs" for j in range(n)
                                if own[j]}
    aliases = _Aliases()
    functions: dict[str, tuple] = {}
    origins: dict[str, set] = {}
    bound = set().union(*(f.binds for f in facts))
    for f in facts:
        for name, summary in f.functions.items():  # a name defined twice may be either definition when called
            functions[name] = tuple(a | b for a, b in zip(functions.get(name, summary), summary))
    for f in facts:
        for targets, value_names, _, _ in f.bindings:
            # a function's result may be an object it reads (``def get(): return cache``)
            returned = set().union(*(functions[v][4] for v in value_names if v in functions))
            aliases.union(sorted(((targets | value_names | returned) & bound) - set(functions) - set(modules)))
    for f in facts:
        covered = set()
        for targets, _, effects, calls in f.bindings:
            for name in targets - set(modules):
                origins.setdefault(name, set()).update(effects | calls)  # how its value may have been made
            covered |= targets
        for name in f.binds - covered - set(f.functions) - set(modules):  # bound some other way: the whole cell
            origins.setdefault(name, set()).update(f.calls | f.effects)
    plotting = {name for name, made in origins.items() if PLOT in made}  # figures, axes, widgets...
    keep, why = [not o for o in own], {}
    needed, world = set(), set()
    known = bound | set(modules)  # names the notebook never binds (builtins) are nobody's to change
    for i in reversed(range(n)):
        f = facts[i]
        if own[i] and i < first_learner:
            reason = _needed(f, _resolve(f, functions, origins, aliases, modules, known), needed, world)
            if reason:
                keep[i], why[i] = True, reason
                if slim is not None and not f.opaque:
                    slimmer = slim_imports(sources[i], needed, PLOT in world, modules)
                    if slimmer is not None:
                        slim[i] = slimmer
        elif own[i]:
            keep[i], why[i] = True, "after the first exercise cell"
        if keep[i]:
            if f.opaque:
                return ([True] * (i + 1) + keep[i + 1:], {**why, **{j: f"before the opaque cell {i}"
                                                                    for j in range(i) if own[j]}})
            used = f.reads | f.mutates | f.calls
            used |= _reads_when_called(used, functions, origins)
            needed |= aliases.classes(used & bound - set(modules))
            needed |= {name for name in f.reads if name in modules}  # re-imported or not, its import must run
            world |= f.world_reads | ({PLOT} if f.reads & plotting else set())
    return keep, why


# Packages whose import sets up plotting (pyplot picks its backend; ``%matplotlib`` imports pyplot): kept with any
# later cell that reads plotting state.
_PLOTTING = {"matplotlib", "ipywidgets", "IPython"}
_MAGIC_LINE = re.compile(r"^\s*%matplotlib(\s+\w+)?\s*$")


def slim_imports(source: str, needed: set, plotting: bool, modules: dict) -> str | None:
    """``source`` without the imports that no later cell needs, or None when it has none to leave out.

    Only a cell of plain Python and ``%matplotlib`` lines is slimmed (any other magic, or a syntax error: None). An
    imported name is left out when it is bound by imports only (``modules``), no later kept cell reads it or its top
    package (``needed``; ``attnlab.plot.x`` needs every ``from attnlab import ..``), no other statement of the cell
    reads them, and, for plotting packages, no later cell reads plotting state (``plotting``). ``%matplotlib`` goes
    when no plotting import stays. A cell with two statements on one line is run as it is. Importing pyplot and
    ipywidgets that nothing uses was most of a grading's kernel time in notebook 02."""
    lines = source.splitlines()
    magics = {n for n, line in enumerate(lines) if _MAGIC_LINE.match(line)}
    if any(line.lstrip().startswith(("%", "!")) for n, line in enumerate(lines) if n not in magics):
        return None
    code = "\n".join("pass" if n in magics else line for n, line in enumerate(lines))
    try:
        with AST_LOCK:
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    spans = [range(node.lineno, node.end_lineno + 1) for node in tree.body]
    if sum(map(len, spans)) != len(set().union(*spans)):  # lines are dropped whole: one statement a line
        return None
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    rest = [node for node in tree.body if node not in imports]
    wanted = set(needed) | {node.id for stmt in rest for node in ast.walk(stmt) if isinstance(node, ast.Name)}

    def top(node, alias) -> str:
        return (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]

    def keeps(node, alias) -> bool:
        binding = _import_binding(node, alias)
        if binding is None:  # relative or star: kept
            return True
        bound, package = binding[0], top(node, alias)
        return bound not in modules or bound in wanted or package in wanted or (plotting and package in _PLOTTING)

    drop, rewrite, plotting_kept = set(), {}, plotting
    for node in imports:
        kept = [alias for alias in node.names if keeps(node, alias)]
        plotting_kept |= any(top(node, alias) in _PLOTTING for alias in kept)
        if len(kept) < len(node.names):
            span = range(node.lineno - 1, node.end_lineno)
            drop.update(span)
            if kept:
                slimmer = copy.copy(node)
                slimmer.names = kept
                rewrite[node.lineno - 1] = " " * node.col_offset + ast.unparse(slimmer)
    if not plotting_kept:
        drop |= magics
    if not drop:
        return None
    return "\n".join(rewrite.get(n, line) for n, line in enumerate(lines) if n not in drop or n in rewrite)


_CALLS_ARGUMENTS = "calls its arguments"


def _reads_when_called(names: set, functions: dict, origins: dict) -> set:
    """The global names read by the notebook functions a cell may call through ``names``: the functions it names,
    those its objects were made with (``interactive(draw)``), and the functions those call. A function reads a global
    when it runs, so a cell that binds that name between the function's definition and this cell is needed here."""
    reads, seen, todo = set(), set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in functions:
            _, _, _, calls, body_reads = functions[name]
            reads |= body_reads
            todo += list(calls | body_reads)
        todo += [item for item in origins.get(name, ()) if item in functions]
    return reads


def _resolve(f: CellFacts, functions: dict, origins: dict, aliases: _Aliases, modules: dict,
             known: set) -> tuple[set, set]:
    """The names (as alias classes, and module names) and world locations a cell may change, its calls followed
    through the notebook's functions and through how the objects it calls were made."""
    changed = set(f.mutates) | set(f.binds)
    world = set(f.effects) - {_CALLS_ARGUMENTS}
    seen, todo = set(), list(f.calls) + (list(f.reads) if _CALLS_ARGUMENTS in f.effects else [])
    while todo:
        name = todo.pop()
        if name in seen or name in modules:  # calls through modules are in the cell's effects already
            continue
        seen.add(name)
        if name in functions:
            mutates, binds, effects, calls, _ = functions[name]
            changed |= mutates | binds
            world |= effects - {_CALLS_ARGUMENTS}
            todo += list(calls) + (list(f.reads) if _CALLS_ARGUMENTS in effects else [])
        elif name in origins:
            for item in origins[name]:
                if item == _CALLS_ARGUMENTS:
                    world.add(ANY)
                elif item in (ANY, PLOT) or item in PRIVATE:
                    world.add(item)
                else:
                    todo.append(item)
        elif name not in PURE_BUILTINS:  # a name the notebook never binds: an unknown builtin, or undefined
            world.add(ANY)
    modules_bound = {name for name in f.binds if name in modules}
    return aliases.classes((changed & known) - set(modules)) | modules_bound, world


def _needed(f: CellFacts, effects: tuple[set, set], needed: set, world: set) -> str:
    """Why a cell before the exercises must run (empty: it need not)."""
    if f.opaque:
        return f"opaque: {f.opaque}"
    changed, changed_world = effects
    if ANY in changed_world:
        return "may change state outside the notebook's names"
    hit = changed & needed
    if hit:
        return "binds or changes " + ", ".join(sorted(hit)[:5])
    hit = changed_world & world
    if hit:
        return "changes " + ", ".join(sorted(hit))
    return ""
