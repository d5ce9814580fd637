"""``lossless sweep``: server configurations x loads, each configuration until it saturates, one page.

options.py  ``SweepOptions``: the configurations (serve flags, a command, or URLs) and bench's options
servers.py  ``served()``: one configuration's server started on a free port, ready, and stopped
run.py      ``run()``: each configuration served and benched in turn -> ``SweepResult``
"""
