"""Shaped links on one machine: ``ShapedNetwork(nodes, link)`` builds, as a context
manager, one Linux network namespace per node::

    namespace lsgd-<pid>-n0 (node 0)        namespace lsgd-<pid>-br (the switch)
      lo         workers of node 0 talk here     br0 10.77.0.100/24 -- p0, ..., p{n-1}
      eth0 10.77.0.101/24  <== veth ==>  p0
    namespace lsgd-<pid>-n1 (node 1)
      eth0 10.77.0.102/24  <== veth ==>  p1
    ...

Each node reaches the others only through its ``eth0``, shaped by the kernel's
token-bucket filter in both directions (a latency by ``netem``). Nothing is created
outside these namespaces; ``close()`` (also on an error, Ctrl-C or SIGTERM) deletes
them, :func:`remove_leftovers` those of a killed run. Needs root and ``iproute2``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import types
from collections.abc import Sequence
from typing import Any

from lsgd.links.spec import Link, parse_link

SUBNET = "10.77.0"  # a private /24, seen only inside the namespaces made here
FIRST_HOST = 101  # node i is SUBNET.(101 + i): equal-width addresses sort like node indices
SWITCH_HOST = 100  # the switch's own address, SUBNET.100
MAX_NODES = 99
_NAME = re.compile(r"lsgd-(\d+)-(n\d+|br|probe)$")
MODELED_HINT = ("use the simulator's modeled link instead: --backend threads --link RATE "
                "(lsgd.simulate(..., link=...))")


class LinkSetupError(RuntimeError):
    """The shaped network cannot be built here; the message says why and what to do."""


def _run(args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True)
    if check and result.returncode != 0:
        why = result.stderr.strip() or result.stdout.strip()
        raise LinkSetupError(f"'{' '.join(args)}' failed: {why}")
    return result


def shaping_problem() -> str | None:
    """Why shaped links cannot be built here (not root, or no ``ip``/``tc``), None if they can."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return (f"shaped links need {' and '.join(missing)} (Debian package iproute2: "
                f"apt-get install iproute2); {MODELED_HINT}")
    if os.geteuid() != 0:
        return "shaped links need root (network namespaces and tc); run as root, or " + MODELED_HINT
    return None


def check_tools() -> None:
    """Raise :class:`LinkSetupError` unless this process is root with ``ip`` and ``tc``."""
    problem = shaping_problem()
    if problem:
        raise LinkSetupError(problem)


def shaped_links_possible(link: str | Link) -> None:
    """Raise :class:`LinkSetupError` where ``link`` cannot be shaped here: no root, no
    ``ip``/``tc``, or a latency on a kernel without ``netem`` (tried in a namespace)."""
    check_tools()
    link = parse_link(link)
    if not link.latency:
        return
    probe = f"lsgd-{os.getpid()}-probe"
    _run(["ip", "netns", "add", probe])
    try:
        _add_netem(probe, "lo", link, delay=0.001)
    finally:
        _delete_namespace(probe)


def _add_netem(namespace: str, device: str, link: Link, delay: float) -> None:
    """A ``netem`` delay as the root qdisc (handle ``1:``) of ``device``, or a
    :class:`LinkSetupError` saying what to do where the kernel cannot add one."""
    result = _run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "handle",
                   "1:", "netem", "delay", f"{delay * 1e6:.0f}us"], check=False)
    if result.returncode != 0:
        raise LinkSetupError(
            f"link {link}: this kernel cannot add a latency to a shaped link (tc netem: "
            f"{result.stderr.strip()}); give the rate alone, such as --link "
            f"{Link(link.rate)}, or " + MODELED_HINT)


def enter_namespace(name: str) -> None:
    """Move the calling process into the network namespace ``name`` (under /run/netns):
    ``setns(fd, CLONE_NEWNET)``, by os.setns where Python has it (3.12), else libc's."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if hasattr(os, "setns"):
            os.setns(fd, os.CLONE_NEWNET)
        else:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                raise OSError(ctypes.get_errno(), "setns into a network namespace failed")
    finally:
        os.close(fd)


def node_address(node: int) -> str:
    """Node ``node``'s address on the shaped network."""
    return f"{SUBNET}.{FIRST_HOST + node}"


def switch_address() -> str:
    """The switch's own address on the shaped network (its bridge ``br0``): every node
    reaches it through its own link, so a node whose link is down loses it alone."""
    return f"{SUBNET}.{SWITCH_HOST}"


def node_namespace(node: int, owner: int | None = None) -> str:
    """The namespace of node ``node`` in the shaped network built by process ``owner``
    (default: this one); ``lsgd train --link`` builds its network in its own process."""
    return f"lsgd-{os.getpid() if owner is None else owner}-n{node}"


def set_node_link(node: int, up: bool, owner: int | None = None) -> None:
    """Take node ``node``'s link (its ``eth0``) down or bring it back ``up``, as a cable
    pulled and plugged in again; its shaping stays. ``owner``: the process that built
    the network (:func:`node_namespace`). :class:`LinkSetupError` if there is no such node."""
    _run(["ip", "-n", node_namespace(node, owner), "link", "set", "eth0",
          "up" if up else "down"])


def set_node_rate(node: int, link: str | Link, owner: int | None = None) -> None:
    """Shape node ``node``'s link, both ways, to ``link``'s rate; its queue and latency
    stay. ``owner`` as for :func:`set_node_link`."""
    link = parse_link(link)
    owner = os.getpid() if owner is None else owner
    for namespace, device in ((node_namespace(node, owner), "eth0"),
                              (f"lsgd-{owner}-br", f"p{node}")):
        _run(["tc", "-n", namespace, "qdisc", "change", "dev", device, *_tbf(link)])


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    result = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def has_namespace(name: str) -> bool:
    """Whether the network namespace ``name`` exists."""
    return name in _namespaces()


def _delete_namespace(name: str) -> None:
    """Kill what still runs inside ``name``, then delete it (its interfaces go with it)."""
    for pid in _run(["ip", "netns", "pids", name], check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _run(["ip", "netns", "delete", name], check=False)


def remove_leftovers() -> list[str]:
    """Delete the namespaces of earlier runs whose process is gone; their names."""
    removed = []
    for name in _namespaces():
        match = _NAME.match(name)
        if match and not alive(int(match.group(1))):
            _delete_namespace(name)
            removed.append(name)
    return removed


def burst_bytes(link: Link) -> int:
    """The token bucket's size: 10 ms of traffic at the link's rate, at least 16 KB (a
    full-size segment); a transfer after an idle moment sends this much at once."""
    return max(16_384, int(link.rate / 8 / 100))


def _tbf(link: Link) -> list[str]:
    """``tc`` arguments of a token bucket at the link's rate (:func:`burst_bytes`), with
    a queue of 100 ms, enough for TCP to keep the link full: the root qdisc, or under
    the latency's ``netem`` (handle ``1:``) where the link has one."""
    where = ["parent", "1:", "handle", "2:"] if link.latency else ["root"]
    return [*where, "tbf", "rate", f"{int(link.rate)}bit", "burst", str(burst_bytes(link)),
            "latency", "100ms"]


class ShapedNetwork:
    """``nodes`` network namespaces joined by links shaped to ``link`` (see the module)."""

    def __init__(self, nodes: int, link: str | Link) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes: a shaped network has 1 to {MAX_NODES} nodes, got {nodes}")
        self.link = parse_link(link)
        self.switch = f"lsgd-{os.getpid()}-br"
        self.namespaces = [node_namespace(i) for i in range(nodes)]
        self._made: list[str] = []
        self._sigterm: Any = None

    def _make_namespace(self, name: str) -> None:
        if name in _namespaces():  # this very pid's earlier network, never closed
            _delete_namespace(name)
        _run(["ip", "netns", "add", name])
        self._made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _build(self) -> None:
        self._make_namespace(self.switch)
        _run(["ip", "-n", self.switch, "link", "add", "br0", "up", "type", "bridge"])
        _run(["ip", "-n", self.switch, "addr", "add", f"{switch_address()}/24", "dev", "br0"])
        for i, name in enumerate(self.namespaces):
            self._make_namespace(name)
            port = f"p{i}"
            _run(["ip", "link", "add", "eth0", "netns", name, "type", "veth",
                  "peer", "name", port, "netns", self.switch])
            _run(["ip", "-n", self.switch, "link", "set", port, "master", "br0", "up"])
            _run(["ip", "-n", name, "addr", "add", f"{node_address(i)}/24", "dev", "eth0"])
            _run(["ip", "-n", name, "link", "set", "eth0", "up"])
            self._shape(name, "eth0")  # upload
            self._shape(self.switch, port)  # download

    def _shape(self, namespace: str, device: str) -> None:
        if self.link.latency:
            _add_netem(namespace, device, self.link, self.link.latency)
        _run(["tc", "-n", namespace, "qdisc", "add", "dev", device, *_tbf(self.link)])

    def close(self) -> None:
        """Delete every namespace this network made (idempotent)."""
        while self._made:
            _delete_namespace(self._made.pop())

    def command(self, node: int, args: Sequence[str]) -> list[str]:
        """``args`` run inside node ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[node], *args]

    def __enter__(self) -> ShapedNetwork:
        """Build the namespaces, links and shaping; on any failure remove them again.
        Meanwhile SIGTERM becomes an exception, so that ``__exit__`` still cleans up."""
        def _terminate(signum: int, frame: types.FrameType | None) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        with contextlib.suppress(ValueError):  # not the main thread: the caller handles signals
            self._sigterm = signal.signal(signal.SIGTERM, _terminate)
        try:
            check_tools()
            remove_leftovers()
            self._build()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None
