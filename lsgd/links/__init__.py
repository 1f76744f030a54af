"""Links between nodes (:class:`Link`, a rate and a latency): the simulator models them
on its virtual clock (:mod:`lsgd.comm.wire`), :mod:`lsgd.links.netns` shapes real ones.
"""

from lsgd.links.spec import Link, parse_link

__all__ = ["Link", "parse_link"]
