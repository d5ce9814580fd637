"""``lossless watch`` and ``lossless history``: a bench configuration on a schedule, its runs kept in a
history, and whether the endpoint is still as fast as it was.

options.py   ``WatchOptions``: the bench options, the schedule, the database
run.py       ``run()``: bench runs on the schedule, each stored once its files are whole
schedule.py  ``parse_duration()``, ``Schedule``: durations ("30m") and when each run starts
store.py     ``open_db()``: the history, a SQLite database, one row per run and per endpoint and load
changes.py   the rules that flag a change (a run outside its band; Pettitt's change-point test)
trends.py    ``trends()``: the history's runs -> series with their flags and change points
"""
