"""``lossless watch`` and ``lossless history``: a bench configuration on a schedule, its runs kept in a
history, and whether the endpoint is still as fast as it was.

schedule.py  durations ("30m") and when each run starts
stage.py     the watch: bench runs on the schedule, each stored once its files are whole
store.py     the history: a SQLite database, one row per run and per run, endpoint and load
changes.py   the rules that flag a change (a run outside its band; Pettitt's change-point test)
trends.py    the history's runs -> series with their flags and change points
"""
