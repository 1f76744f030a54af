"""``lsgd plan`` (:mod:`lsgd.planner.command`) and ``lsgd.plan(...)``
(:mod:`lsgd.planner.planning`): which method, how often, and what it costs on a link,
before training (docs/plan.md)."""
