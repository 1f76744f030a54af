"""Edge colouring: a graph's edges as matchings, rounds of pairwise exchange; never more
than ``D + 1`` for maximum degree ``D`` (Vizing's bound)."""

from __future__ import annotations

from collections.abc import Sequence

Edge = tuple[int, int]


def edge_colouring(size: int, edges: Sequence[Edge]) -> list[list[Edge]]:
    """Split ``edges`` into matchings: at most ``max_degree + 1`` of them.

    Greedy colouring (each edge takes the smallest colour free at both ends), in sorted
    order, then in a depth-first walk's, is often optimal (``max_degree`` colours) but may
    need up to ``2 max_degree - 1``; Misra and Gries' algorithm guarantees
    ``max_degree + 1``. The first optimal one is kept, else the one with fewest colours.
    """
    edges = sorted(edges)
    if not edges:
        return []
    degree = max(map(len, neighbour_lists(size, edges)))  # no colouring needs fewer colours
    best = _greedy_colouring(size, edges)
    if len(best) > degree:
        best = min(best, _greedy_colouring(size, _walk_order(size, edges)), key=len)
    if len(best) > degree:
        best = min(best, _misra_gries(size, edges), key=len)
    best = [sorted(m) for m in best]
    for matching in best:  # invariant: a matching touches each worker at most once
        ends = [v for e in matching for v in e]
        assert len(ends) == len(set(ends)), matching
    assert sorted(e for m in best for e in m) == edges
    return best


def neighbour_lists(size: int, edges: Sequence[Edge]) -> list[list[int]]:
    """Each worker's neighbours, in the order of ``edges``."""
    adj: list[list[int]] = [[] for _ in range(size)]
    for i, j in edges:
        adj[i].append(j)
        adj[j].append(i)
    return adj


def _walk_order(size: int, edges: Sequence[Edge]) -> list[Edge]:
    """The edges in the order a depth-first walk (smallest neighbour first) crosses
    them; greedy colouring in this order 2-colours every even cycle."""
    adj = neighbour_lists(size, edges)
    visited = [False] * size
    seen: set[Edge] = set()
    order: list[Edge] = []
    for start in range(size):
        if visited[start]:
            continue
        visited[start] = True
        stack = [(start, iter(sorted(adj[start])))]
        while stack:
            v, rest = stack[-1]
            for w in rest:
                e = (min(v, w), max(v, w))
                if e in seen:
                    continue
                seen.add(e)
                order.append(e)
                if not visited[w]:
                    visited[w] = True
                    stack.append((w, iter(sorted(adj[w]))))
                    break
            else:
                stack.pop()
    return order


def _greedy_colouring(size: int, edges: Sequence[Edge]) -> list[list[Edge]]:
    used: list[set[int]] = [set() for _ in range(size)]
    classes: list[list[Edge]] = []
    for i, j in edges:
        c = min(set(range(len(classes) + 1)) - used[i] - used[j])  # smallest free at both
        used[i].add(c)
        used[j].add(c)
        if c == len(classes):
            classes.append([])
        classes[c].append((i, j))
    return classes


def _misra_gries(size: int, edges: Sequence[Edge]) -> list[list[Edge]]:
    """Misra and Gries (1992): a proper edge colouring with ``max_degree + 1`` colours."""
    adj = neighbour_lists(size, edges)
    palette = range(max(map(len, adj)) + 1)
    colour: dict[Edge, int] = {}
    at: list[dict[int, int]] = [{} for _ in range(size)]  # vertex -> {colour: neighbour}

    def key(u: int, v: int) -> Edge:
        return (u, v) if u < v else (v, u)

    def get(u: int, v: int) -> int | None:
        return colour.get(key(u, v))

    def uncolour(u: int, v: int) -> None:
        c = colour.pop(key(u, v), None)
        if c is not None:
            del at[u][c], at[v][c]

    def paint(u: int, v: int, c: int) -> None:
        assert c not in at[u] and c not in at[v]
        colour[key(u, v)] = c
        at[u][c], at[v][c] = v, u

    def free(v: int) -> int:
        return next(c for c in palette if c not in at[v])

    def follows(u: int, w: int, prev: int) -> bool:
        """Whether ``w`` may follow ``prev`` in a fan of ``u``: ``(u, w)``'s colour is
        free at ``prev``."""
        c = get(u, w)
        return c is not None and c not in at[prev]

    def is_fan(u: int, fan: list[int]) -> bool:
        return all(follows(u, w, prev) for prev, w in zip(fan, fan[1:]))

    for u, v in edges:
        fan = [v]  # grown to a maximal fan of u starting at v
        while more := [w for w in adj[u] if w not in fan and follows(u, w, fan[-1])]:
            fan.append(more[0])
        c, d = free(u), free(fan[-1])
        path, x, col = [], u, d  # the cd-path from u, starting with colour d
        while col in at[x]:
            y = at[x][col]
            path.append((x, y, col))
            x, col = y, (c if col == d else d)
        for x, y, _ in path:
            uncolour(x, y)
        for x, y, col in path:
            paint(x, y, c if col == d else d)
        end = next(i for i, w in enumerate(fan) if d not in at[w] and is_fan(u, fan[: i + 1]))
        shifted = [get(u, fan[i + 1]) for i in range(end)]
        for w in fan[: end + 1]:
            uncolour(u, w)
        for i in range(end):
            paint(u, fan[i], shifted[i])  # type: ignore[arg-type]
        paint(u, fan[end], d)
    classes: dict[int, list[Edge]] = {}
    for e in sorted(colour):
        classes.setdefault(colour[e], []).append(e)
    return [classes[c] for c in sorted(classes)]

