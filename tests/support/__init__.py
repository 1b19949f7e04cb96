"""What the tests share besides fixtures (those are in tests/conftest.py), one module a concept:

- `cli`: the `iipub` command line, in process and as a process, and its one-line errors;
- `databases`: the selected backend, a fresh database, snapshots of every row, a private mariadbd;
- `rows`: reads of the stored rows that assertions compare;
- `settings`: settings and config files for runs against the simulator;
- `simulator`: the simulator's lifecycles and a simulator started with them;
- `ticks`: in-process reconcile ticks;
- `loopback`: a recording webhook receiver and other HTTP servers on loopback;
- `plumbing`: the run-wide speed-ups conftest turns on;
- `suite`: fast-loop parametrization and bench/ imports.
"""
