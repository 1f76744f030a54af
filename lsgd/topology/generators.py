"""Graphs by kind: rings, tori, complete graphs, seeded Erdos-Renyi graphs, unions,
and the command line's spelling of them (:func:`from_spec`)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lsgd import _validate
from lsgd.topology.graph import Topology


def from_edges(size: int, edges: Iterable[Sequence[int]], name: str = "edges") -> Topology:
    """A graph from a list of ``(i, j)`` pairs (either orientation, duplicates merged)."""
    return Topology(size, tuple(tuple(e) for e in edges), name)  # type: ignore[arg-type]


def ring(size: int, stride: int = 1) -> Topology:
    """Worker ``i`` linked to ``i + stride`` (mod ``size``): a cycle when gcd(stride, size) = 1.

    ``stride`` > 1 gives other rings over the same workers (for dynamic graphs:
    ``ring(8)`` and ``ring(8, 3)`` are two Hamiltonian cycles of degree 2).
    """
    _validate.positive_int("ring", "size", size)
    _validate.positive_int("ring", "stride", stride)
    if size > 1 and stride % size == 0:
        raise ValueError(f"ring: stride={stride} must not be a multiple of size={size}")
    name = f"ring({size})" if stride == 1 else f"ring({size}, stride={stride})"
    return Topology(size, tuple((i, (i + stride) % size) for i in range(size) if size > 1), name)


def torus(rows: int, cols: int) -> Topology:
    """A 2-D torus: worker ``r * cols + c`` linked to its four wrap-around grid neighbours."""
    _validate.positive_int("torus", "rows", rows)
    _validate.positive_int("torus", "cols", cols)
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    edges = [(r * cols + c, r * cols + (c + 1) % cols) for r, c in cells]  # along a row
    edges += [(r * cols + c, ((r + 1) % rows) * cols + c) for r, c in cells]  # down a column
    return Topology(rows * cols, tuple((i, j) for i, j in edges if i != j), f"torus({rows}x{cols})")


def complete(size: int) -> Topology:
    """Every pair of workers linked."""
    _validate.positive_int("complete", "size", size)
    pairs = tuple((i, j) for i in range(size) for j in range(i + 1, size))
    return Topology(size, pairs, f"complete({size})")


def erdos_renyi(size: int, p: float | None = None, *, edges: int | None = None, seed: int = 0,
                connected: bool = True, max_tries: int = 10_000) -> Topology:
    """A seeded random graph: ``G(size, p)`` (each pair linked with probability ``p``)
    or, with ``edges=m``, ``G(size, m)`` (``m`` distinct pairs uniformly at random).

    With ``connected=True`` (default) graphs are drawn from the seeded stream
    until one is connected, so the result is a function of the arguments alone.
    Average degree ``k`` is ``p = k / (size - 1)`` or ``edges = k * size / 2``.
    """
    _validate.positive_int("erdos_renyi", "size", size)
    if (p is None) == (edges is None):
        raise ValueError("erdos_renyi: pass exactly one of p (edge probability) or edges (count)")
    pairs = [(i, j) for i in range(size) for j in range(i + 1, size)]
    if p is not None and not (_validate.is_number(p) and 0.0 <= p <= 1.0):
        raise ValueError(f"erdos_renyi: p must be a number in [0, 1], got {p!r}")
    if edges is not None and not (_validate.is_int(edges) and 0 <= edges <= len(pairs)):
        raise ValueError(f"erdos_renyi: edges must be an integer in [0, {len(pairs)}] for "
                         f"{size} workers, got {edges!r}")
    drawn = f"p={p:g}" if p is not None else f"edges={edges}"
    if connected and size > 1 and (edges is not None and edges < size - 1 or p == 0):
        raise ValueError(f"erdos_renyi: a connected graph on {size} workers needs at least "
                         f"{size - 1} edges; got {drawn}")
    rng = random.Random(seed)
    name = f"erdos_renyi({size}, {drawn}, seed={seed})"
    for _ in range(max_tries):
        chosen = ([e for e in pairs if rng.random() < p] if p is not None
                  else rng.sample(pairs, edges))  # type: ignore[arg-type]
        graph = Topology(size, tuple(chosen), name)
        if not connected or graph.is_connected:
            return graph
    raise ValueError(f"erdos_renyi: no connected graph in {max_tries} draws with {drawn}; "
                     "raise p or edges")


def union(graphs: Sequence[Topology], name: str | None = None) -> Topology:
    """The graph whose edges are those of any of ``graphs`` (all on the same workers)."""
    if not graphs:
        raise ValueError("union: needs at least one graph")
    sizes = {g.size for g in graphs}
    if len(sizes) != 1:
        raise ValueError(f"union: graphs on different numbers of workers {sorted(sizes)}")
    edges = tuple(e for g in graphs for e in g.edges)
    return Topology(graphs[0].size, edges, name or " + ".join(g.name for g in graphs))


KINDS = ("ring", "torus", "complete", "erdos-renyi")


def make(kind: str, size: int, **kwargs: Any) -> Topology:
    """A graph by name: ``"ring"`` (``stride``), ``"torus"`` (``rows``, default the
    most square split of ``size``), ``"complete"``, ``"erdos-renyi"`` (``p`` or
    ``edges``, default average degree 2; ``seed``)."""
    if kind == "ring":
        return ring(size, **kwargs)
    if kind == "torus":
        most_square = max(r for r in range(1, math.isqrt(size) + 1) if size % r == 0)
        rows = kwargs.pop("rows", None) or most_square
        if size % rows:
            raise ValueError(f"torus: rows={rows} must divide size={size}")
        return torus(rows, size // rows, **kwargs)
    if kind == "complete":
        return complete(size, **kwargs)
    if kind in ("erdos-renyi", "erdos_renyi"):
        if "p" not in kwargs and "edges" not in kwargs:
            kwargs["edges"] = size
        return erdos_renyi(size, **kwargs)
    raise ValueError(f"topology kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")


def from_spec(spec: str, size: int) -> Topology:
    """A graph from a short text, as the command line gives it.

    ``KIND`` or ``KIND:key=value,key=value`` with a kind of :data:`KINDS` and the
    keyword arguments of :func:`make` (``ring:stride=3``,
    ``erdos-renyi:seed=1``, ``erdos-renyi:edges=12,seed=2``, ``torus:rows=2``),
    or the path of an edge-list file: one ``i j`` pair per line, ``#`` comments.
    """
    path = Path(spec)
    if spec.partition(":")[0].strip() not in (*KINDS, "erdos_renyi") and (
            path.suffix or "/" in spec or path.exists()):
        return read_edges(path, size)
    kind, _, options = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, (o.strip() for o in options.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"topology {spec!r}: options are key=value, got {item!r}")
        number = float(value)
        kwargs[key.strip()] = int(number) if number.is_integer() and key.strip() != "p" else number
    return make(kind.strip(), size, **kwargs)


def read_edges(path: Path, size: int) -> Topology:
    """The graph of an edge-list file: one ``i j`` pair of worker ranks per line (or
    ``i,j``), ``#`` comments; the file's highest rank is its last worker, so it must
    name every rank up to ``size - 1`` and none above. A ``ValueError`` names the file,
    and the line or the ranks that do not fit."""
    if not path.is_file():
        raise ValueError(f"topology file {path} does not exist (expected one 'i j' per line)")
    edges = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.replace(",", " ").split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"{path}:{number}: expected two worker ranks 'i j', got {line!r}")
        edges.append((int(parts[0]), int(parts[1])))
    top = max((max(e) for e in edges), default=-1)
    if top + 1 != size:
        raise ValueError(
            f"topology file {path} is a graph of {top + 1} workers (ranks 0 to {top}), but "
            f"the run has {size}: run {top + 1} workers, or give a file whose ranks go from "
            f"0 to {size - 1}")
    return from_edges(size, edges, name=path.name)
