"""The shape of the house, checked from the source: layers, one-way imports, no cycles.

    config <- core <- hf <- units <- capture <- interventions <- results <- views / evaluation <- api <- cli / app

(hf loads a model and knows its kind and hook points; units are a text's words, sentences and spans as
groups of tokens; capture observes a run; interventions edit a run and price it.)

Every ``import`` statement counts, including those made inside functions (they run too). The
package root (``attnflow/__init__.py``, the public facade) may import anything; nothing imports it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "attnflow"

# Longest prefix wins. Same-layer packages may import each other, but never in a cycle.
LAYERS = {
    "attnflow.errors": 0, "attnflow.data": 0, "attnflow.models": 0,  # the exception, data, bundled model folders
    "attnflow.config": 0,  # Settings and the method registry: tables every layer reads
    "attnflow.core": 1,
    "attnflow.hf": 2,  # the model room: loading, the architecture table, kinds, named hook points
    "attnflow.units": 3,  # words, sentences, spans as groups of tokens: tokenizers, not models
    "attnflow.capture": 4,  # observe a run
    "attnflow.interventions": 5,  # edit a run and run it again; their cost model
    "attnflow.results": 6,
    "attnflow.views": 7, "attnflow.evaluation": 7,
    "attnflow.api": 8, "attnflow.reproduction": 8, "attnflow.batch": 8,  # entry points; reproduction.training trains the bundled models
    "attnflow.cli": 9,
    "attnflow.app": 9,  # the live explorer: as thin as the CLI, over the api
}
CORE_ALLOWED = {"numpy", "torch", "scipy", "numba", "networkx"}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = modules()


def layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{name} belongs to no layer; add it to LAYERS"
    return LAYERS[best]


def imports(name: str) -> tuple[set[str], set[str]]:
    """(attnflow modules, top-level third-party/stdlib names) that module ``name`` imports anywhere."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    ours, others = set(), set()

    def add(target: str) -> None:
        if target == "attnflow" or target.startswith("attnflow."):
            while target not in MODULES and "." in target:  # `from attnflow.x import function`
                target = target.rsplit(".", 1)[0]
            ours.add(target)
        else:
            others.add(target.split(".")[0])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports: resolve against this module's package
                base = name.split(".")[: len(name.split(".")) - node.level + (MODULES[name].name == "__init__.py")]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                add(f"{prefix}.{alias.name}")
    ours.discard(name)
    return ours, others


GRAPH = {name: imports(name)[0] for name in MODULES}


def test_package_root_holds_only_the_facade_the_errors_and_packages():
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert loose == ["__init__.py", "__main__.py", "errors.py"]
    for folder in (p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        has_code = any(folder.rglob("*.py"))
        assert not has_code or (folder / "__init__.py").is_file(), f"{folder.name} is not a package"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n not in ("attnflow", "attnflow.__main__")))
def test_imports_point_down_the_layers(name):
    mine = layer(name)
    for target in sorted(GRAPH[name]):
        assert target != "attnflow", f"{name} imports the package root (the facade); import the module instead"
        assert layer(target) <= mine, f"{name} (layer {mine}) imports {target} (layer {layer(target)})"


def test_models_is_a_leaf():
    """The bundled model folders import only the library's exception: the scripts that train them live
    in reproduction.training, so capture (which loads them) and models never import each other."""
    for name, targets in GRAPH.items():
        if name.startswith("attnflow.models"):
            assert targets <= {"attnflow.errors"}, f"{name} imports {sorted(targets - {'attnflow.errors'})}"


def test_views_and_evaluation_never_touch_models():
    for name, targets in GRAPH.items():
        if name.startswith(("attnflow.views", "attnflow.evaluation", "attnflow.results")):
            bad = sorted(t for t in targets
                         if t.startswith(("attnflow.capture", "attnflow.interventions", "attnflow.models")))
            assert not bad, f"{name} imports {bad}: views, evaluation and results take results, not models"


def test_core_imports_only_math():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name in MODULES:
        if name.startswith("attnflow.core"):
            _, others = imports(name)
            assert others - stdlib <= CORE_ALLOWED, f"{name} imports {sorted(others - stdlib - CORE_ALLOWED)}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a self-loop)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph = {n: {t for t in ts if t != "attnflow"} for n, ts in GRAPH.items() if n != "attnflow"}
    assert cycles(graph) == [], f"import cycles: {cycles(graph)}"


def test_the_checker_can_fail():
    # A cycle through three modules and a function-level import are both seen.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "attnflow.views.heatmap" in GRAPH["attnflow.views"]  # imported inside the presenter's plot()
    assert layer("attnflow.api.text") > layer("attnflow.views.table") > layer("attnflow.capture.text")
    # the rooms that know transformers, in the order data flows through them (issue 43)
    assert (layer("attnflow.hf.load") < layer("attnflow.units.spans") < layer("attnflow.capture.text")
            < layer("attnflow.interventions.ablation") < layer("attnflow.api.text"))


def test_help_and_import_do_not_load_torch():
    import subprocess

    code = ("import sys, attnflow; import attnflow.cli; "
            "print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# ------------------------------------------------------------------ one home per setting, method and model fact

def _spellings(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """Literal tuples, lists, sets and dict keys that spell two or more of a group: the registry's
    method names, a setting's allowed values, the target names. ``__all__`` and the facade's ``_LAZY``
    (function names, not lists of methods) do not count."""
    from attnflow.config import registry
    from attnflow.config.settings import OPTIONS, TARGET_NAMES, choices

    groups = {"method names": set(registry.REGISTRY) | {registry.ALL}, "target names": set(TARGET_NAMES),
              **{f"{n} values": set(choices(n, none=False)) for n in ("head_fusion", "weighting", "causal_norm")}}
    # a setting's values count when they include its default ("min"/"max" keys of a range are no head fusions)
    needed = {f"{n} values": OPTIONS[n].default for n in ("head_fusion", "weighting")}
    exempt = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id in ("__all__", "_LAZY") for t in node.targets)}
    found = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        strings = {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        for group, names in groups.items():
            if len(strings & names) >= 2 and needed.get(group, next(iter(strings & names))) in strings:
                found.append((node.lineno, group, sorted(strings & names)))
    return found


def test_no_module_outside_settings_and_the_registry_spells_their_lists():
    homes = {"attnflow.config.settings", "attnflow.config.registry"}
    for name, path in MODULES.items():
        if name not in homes:
            found = _spellings(ast.parse(path.read_text(encoding="utf-8")))
            assert not found, f"{name} spells {found}: read attnflow.config.settings / attnflow.config.registry"


def _class_name_checks(tree: ast.AST) -> list[int]:
    """Lines that guess what a model is from a class name: ``"CausalLM" in name``,
    ``name.endswith("ForSequenceClassification")`` and the like."""
    import re

    pattern = re.compile(r"^(For[A-Z]\w*|\w*(CausalLM|LMHead\w*|Classification|ConditionalGeneration|Seq2SeqLM))$")

    def marks(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(pattern.match(node.value))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if marks(node.left) or any(isinstance(c, (ast.Tuple, ast.List)) and any(marks(e) for e in c.elts)
                                       for c in node.comparators):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("endswith", "startswith") and any(marks(a) for a in node.args)):
            lines.append(node.lineno)
    return lines


def test_no_model_kind_is_guessed_from_a_class_name():
    for name, path in MODULES.items():
        lines = _class_name_checks(ast.parse(path.read_text(encoding="utf-8")))
        assert not lines, (f"{name} guesses a model's kind from its class name at lines {lines}: read the "
                           "architecture table (attnflow.api.models.resolve / hf.architectures.model_head)")


def test_the_source_checkers_can_fail():
    snippet = ast.parse('M = ("raw", "flow")\nF = {"mean": 1, "max": 2}\n__all__ = ["raw", "rollout"]\n'
                        'ok = ("raw", {"min": 0, "max": 1})\n'
                        'if "CausalLM" in name or n.endswith("ForSequenceClassification"): pass\n')
    assert [(line, group) for line, group, _ in _spellings(snippet)] == [(1, "method names"), (2, "head_fusion values")]
    assert _class_name_checks(snippet) == [5, 5]


def test_cli_and_app_reach_models_through_the_api():
    for name, targets in GRAPH.items():
        if name.startswith(("attnflow.cli", "attnflow.app")):
            bad = sorted(t for t in targets
                         if t.startswith(("attnflow.hf", "attnflow.capture", "attnflow.interventions", "attnflow.core")))
            assert not bad, f"{name} imports {bad}: the CLI and the app go through attnflow.api, results and views"


# Process machinery (subprocesses, signals, shared memory) lives behind the runner the api passes in
# (api/flowrun.py); no core module may use it.
PROCESS_MACHINERY_IN_CORE: set[str] = set()


def test_core_runs_no_processes():
    for name in MODULES:
        if name.startswith("attnflow.core"):
            _, others = imports(name)
            process = others & {"subprocess", "signal", "ctypes", "multiprocessing"}
            assert not process or name in PROCESS_MACHINERY_IN_CORE, f"{name} imports {sorted(process)}"


def test_the_package_root_lists_only_the_public_api():
    import attnflow

    shown = set(dir(attnflow))
    assert not shown & {"Any", "annotations", "importlib"}, shown
    assert set(attnflow.__all__) <= shown and all(not n.startswith("_") for n in attnflow.__all__)
    for name in attnflow.__all__:
        assert getattr(attnflow, name) is not None


def test_the_apps_route_handlers_live_at_module_level():
    """Each route's handler is a module-level function (readable, testable alone), not a closure
    nested in create_app; create_app only wires the routes to the catalog and job store."""
    tree = ast.parse(MODULES["attnflow.app.server"].read_text(encoding="utf-8"))
    create = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "create_app")
    nested = [n.name for n in ast.walk(create) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not create]
    assert nested == [], f"create_app defines {nested}"
    assert create.end_lineno - create.lineno < 15


def _name_comparisons(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of every comparison with a single registered method name: ``method == "flow"``,
    ``"grad-rollout" in methods``, ``name != "ablated-flow"`` (a fact about a method belongs on its
    registry record: attnflow.config.registry.Method)."""
    from attnflow.config import registry

    names = set(registry.REGISTRY)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        for side in (node.left, *node.comparators):
            if isinstance(side, ast.Constant) and side.value in names:
                found.append((node.lineno, side.value))
    return found


# The paper's three as core maths, by name, for the evaluation and the benchmarks (the registry's
# functions are the entry points' way in); raw and rollout from queries and keys, by name, likewise.
# What format 0.1's report opened on is history, not a method fact (attnflow.results.schema).
NAME_DISPATCH = {"attnflow.config.registry", "attnflow.core.methods", "attnflow.core.qk_rows",
                 "attnflow.results.schema"}


def test_no_module_compares_a_single_method_name_outside_the_registry():
    for name, path in MODULES.items():
        if name not in NAME_DISPATCH:
            found = _name_comparisons(ast.parse(path.read_text(encoding="utf-8")))
            assert not found, f"{name} compares method names {found}: put the fact on the registry record"


def test_the_name_comparison_checker_can_fail():
    snippet = ast.parse('if method == "flow": pass\nif "grad-rollout" in methods: pass\n'
                        'if record.gradients: pass\nx = "flow"\nif kind == "text": pass\n'
                        'if m != "ablated-flow" and m in ("raw",): pass\n')
    assert _name_comparisons(snippet) == [(1, "flow"), (2, "grad-rollout"), (6, "ablated-flow")]


def test_every_registry_function_lives_in_api_methods_and_results_sit_below_the_entry_points():
    from attnflow.config import registry

    outside = [m.name for m in registry.REGISTRY.values()
               if not m.function.partition(":")[0].startswith("attnflow.api.methods.")]
    assert not outside, f"{outside}: a method's function is attnflow/api/methods/<module>.py (see the registry)"
    assert layer("attnflow.results") < min(layer("attnflow.views"), layer("attnflow.api"), layer("attnflow.batch"))
    assert all(layer(t) <= layer("attnflow.results") for t in GRAPH["attnflow.results"] if t != "attnflow")
