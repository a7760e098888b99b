"""How the code is laid out, in numbers: ``python -m benchmarks.structure [--walk] [--json PATH]``.

For each folder of the product (``explorer/*``, ``models``, ``kernels``) it prints, from the code's own
imports (every ``import`` at any depth, read with ``ast``; edges inside the folder only):

- ``modules``: the ``.py`` files below it;
- ``arrows``: import edges between those modules;
- ``floors``: the longest chain of imports inside the folder (modules that import nothing of the folder
  are floor 1; a module sits one floor above the highest it imports; a cycle counts as one floor);
- ``upward``: edges that run against the floors, i.e. edges inside an import cycle;
- ``parts`` / ``part_arrows`` / ``part_floors`` / ``part_upward``: the same on the folder's direct
  children (sub-folders and top-level modules), an edge where any module of one imports any of another.

``--walk`` traces what happens when a visitor picks an attention pattern: the Attention tab's handler
(``refresh_attention``) is called, in a fresh process, with ``attention="sliding_window"`` and followed
(``sys.setprofile``) until the first call of an attention function in ``kernels/``. It prints, for every call of the
project's code on the way, the files entered (``files``), the steps from one file to another (``steps``) and how many of
those steps return to a file already left (``returns``); and the same for the call chain (the stack) at the moment the
kernel is entered: how deep the choice travels and how often it comes back to a file it left.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("models", "kernels", "explorer")
FOLDERS = (
    "explorer/app",
    "explorer/analysis",
    "explorer/runtime",
    "explorer/figures",
    "explorer/training",
    "explorer/export",
    "models",
    "kernels",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict:
    """``{module name: path}`` of every module of the product's packages."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _base(module: str, is_pkg: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".") if is_pkg else module.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def import_graph(mods: dict) -> dict:
    """``{module: set of project modules it imports}``; ``from pkg import name`` points at ``pkg.name``
    when that is a module, else at ``pkg``."""
    graph = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _base(name, is_pkg, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def _sccs(nodes: list, edges: dict) -> dict:
    """``{node: component id}`` (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], {}, [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        n = stack.pop()
                        on.discard(n)
                        out[n] = node
                        if n == node:
                            break
    return out


def layering(nodes: list, edges: dict) -> dict:
    """``arrows``, ``floors`` and ``upward`` of a directed graph (edges among ``nodes`` only)."""
    edges = {n: {m for m in edges.get(n, ()) if m in nodes and m != n} for n in nodes}
    comp = _sccs(nodes, edges)
    cedges = {}
    for n in nodes:
        cedges.setdefault(comp[n], set()).update(comp[m] for m in edges[n] if comp[m] != comp[n])
    floor: dict = {}

    def depth(c):
        if c not in floor:
            floor[c] = 0  # guard (the condensation has no cycle)
            floor[c] = 1 + max((depth(d) for d in cedges.get(c, ())), default=0)
        return floor[c]

    sys.setrecursionlimit(10000)
    return {
        "arrows": sum(len(v) for v in edges.values()),
        "floors": max((depth(c) for c in set(comp.values())), default=0),
        "upward": sum(1 for n in nodes for m in edges[n] if comp[m] == comp[n]),
    }


def folder_counts(folder: str, graph: dict, mods: dict) -> dict:
    prefix = folder.replace("/", ".")
    inside = sorted(m for m in mods if m == prefix or m.startswith(prefix + "."))
    own = layering(inside, graph)

    def part(m):
        rest = m[len(prefix) :].lstrip(".")
        return rest.split(".")[0] if rest else "__init__"

    parts = sorted({part(m) for m in inside})
    pedges = {p: set() for p in parts}
    for m in inside:
        pedges[part(m)].update(part(t) for t in graph[m] if t in inside)
    by_part = layering(parts, pedges)
    return {"modules": len(inside), **own, "parts": len(parts), **{f"part_{k}": v for k, v in by_part.items()}}


def walk() -> dict:
    """The attention-pattern pick, from the tab's handler to the first kernel call."""
    from explorer.app.tabs import attention
    from explorer.runtime.text import DEFAULT_TEXT

    root = str(ROOT) + "/"
    seq: list = []
    done = []

    def prof(frame, event, arg):
        if done or event != "call":
            return
        f = frame.f_code.co_filename
        if not f.startswith(root):
            return
        rel = f[len(root) :]
        if not seq or seq[-1] != rel:
            seq.append(rel)
        if rel.startswith("kernels/") and "attention" in frame.f_code.co_name:
            chain, fr = [], frame
            while fr is not None:
                name = fr.f_code.co_filename
                if name.startswith(root) and not name.startswith(root + "benchmarks/"):
                    chain.append(f"{name[len(root) :]}:{fr.f_code.co_name}")
                fr = fr.f_back
            done.append(chain[::-1])
            sys.setprofile(None)

    from explorer.app.controls.fields import config_values
    from models import ModelConfig

    values = dict(config_values(ModelConfig()), attention="sliding_window")
    sys.setprofile(prof)
    try:
        attention.refresh_attention(values, DEFAULT_TEXT, None)
    finally:
        sys.setprofile(None)
    chain = done[0] if done else []
    files = [c.split(":")[0] for c in chain]
    hops = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    return {
        "files": len(set(seq)),
        "steps": max(len(seq) - 1, 0),
        "returns": _returns(seq),
        "chain_calls": len(chain),
        "chain_files": len(set(files)),
        "chain_steps": max(len(hops) - 1, 0),
        "chain_returns": _returns(hops),
        "reached_kernel": bool(done),
        "chain": chain,
    }


def _returns(seq: list) -> int:
    """Steps into a file already left earlier in ``seq`` (consecutive repeats are one visit)."""
    seen, out = set(), 0
    for i, f in enumerate(seq):
        if f in seen and seq[i - 1] != f:
            out += 1
        seen.add(f)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walk", action="store_true", help="also trace the attention-pattern pick to the kernel")
    ap.add_argument("--json", help="write the numbers as JSON to this path")
    args = ap.parse_args(argv)
    mods = modules()
    graph = import_graph(mods)
    rows = {f: folder_counts(f, graph, mods) for f in FOLDERS if (ROOT / f).exists()}
    cols = ("modules", "arrows", "floors", "upward", "parts", "part_arrows", "part_floors", "part_upward")
    print(f"{'folder':<20}" + "".join(f"{c:>13}" for c in cols))
    for f, r in rows.items():
        print(f"{f:<20}" + "".join(f"{r[c]:>13}" for c in cols))
    out = {"folders": rows}
    if args.walk:
        w = walk()
        out["walk"] = w
        print(f"\nattention-pattern pick -> first kernel call (reached: {w['reached_kernel']})")
        print(
            f"  every call on the way: {w['files']} files, {w['steps']} steps between files, "
            f"{w['returns']} returns to a file already left"
        )
        print(
            f"  the call chain at the kernel: {w['chain_calls']} calls, {w['chain_files']} files, "
            f"{w['chain_steps']} steps between files, {w['chain_returns']} returns"
        )
        for c in w["chain"]:
            print(f"    {c}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
