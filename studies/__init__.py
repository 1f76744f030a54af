"""The studies: the runs behind the documented tables, each a script with its settings
pinned (``python studies/NAME.py``), beside the package and not part of it.

studies/README.md says what each one measures, which folder of records/ it fills and
how to run it again; :mod:`studies.records` re-derives the documented tables from those
records, of the studies and of ``lsgd bench`` alike.
"""
