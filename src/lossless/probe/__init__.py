"""Parameter fidelity by behaviour: which request parameters does an endpoint really honour?

options.py      ``ProbeOptions``: what probe was asked, every default
run.py          ``run()``: every check against one endpoint -> ``ProbeResult`` (report/probe.py renders it)
checks.py       one function per parameter family -> ``Check`` (name, verdict, evidence)
tool_checks.py  tools, tool_choice and response_format: a forced call, the named function, a JSON answer
"""
