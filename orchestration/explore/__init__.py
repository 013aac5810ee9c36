"""`chaosbed explore`: search random fault schedules in the simulator or on real members (any system), shrink what
fails, confirm it on real members.

The parts, one job each:
  context.py     what a base scenario offers a schedule (members, stack, workload span, bounds)
  foreign_context.py  the same for a foreign system, from the system and its wire profile (`context_for` picks)
  generator.py   the one source of random fault schedules (`Generator.draw(rng)`: `[[faults]]` tables); its moves
                 are in moves.py (network), actions.py (member actions), discards.py (protocol-aware rules) and
                 companions.py (discards that go with a move); plan.py keeps its member actions possible, and
                 fairness.py says what it leaves out (and the shrinker does not make)
  tables.py      the raw scenario and fault tables (TomlTable) and the typed accessors that read their fields
  case.py        a schedule is a scenario: the base scenario with a schedule's faults, run and checked in the
                 simulator with the plain-Python checker (analysis/reference.py)
  real_case.py   a schedule on real members: the runner on a fresh cluster (netns, docker), the reference checker
  pool.py        worker processes running cases (worker.py: `python -m orchestration.explore.worker`), in the
                 simulator or one cluster each on a real backend
  search.py      the search loop (budget, first failure, progress, Ctrl-C)
  shrink.py      minimising a failing case while it fails with the same violated checks (steps in steps.py)
  real_shrink.py the same on real members: each candidate up to k runs (adaptive), each step's rate recorded
  minimal.py     minimal.toml: the shrunk scenario, commented
  finish.py      each failure's folder: minimal.toml, its run folder (the normal run and check)
  confirm.py     replaying a minimal scenario on real members
  result.py      explore.json
  report.py      index.html (timelines drawn by timeline.py)
  progress.py    live progress
  session.py     one exploration from start to end (what `chaosbed explore` runs)
  real_session.py  one exploration on real members: search, shrink by rates, confirm on fresh clusters
  rediscover.py  a catalogue bug from scratch (bench/bench_explore.py and the tests)
"""
