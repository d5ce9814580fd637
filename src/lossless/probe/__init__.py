"""Parameter fidelity by behaviour: which request parameters does an endpoint really honour?

checks.py  one function per parameter family -> Check(name, verdict, evidence); HTTP via client/wire.py
tools.py   tools, tool_choice and response_format: a forced call, the named function, a JSON answer
stage.py   ProbeOptions -> ProbeResult (the embedded server when no URL); report/probe.py renders it
"""
