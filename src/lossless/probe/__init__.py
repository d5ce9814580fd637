"""Parameter fidelity by behaviour: which request parameters does an endpoint really honour?

wire.py    any request body -> a whole Reply (the only HTTP here, over client.http)
checks.py  one function per parameter family -> Check(name, verdict, evidence)
stage.py   ProbeConfig -> ProbeResult (embedded server when no endpoint), table and JSON
"""

from lossless.probe.checks import Check, Settings
from lossless.probe.stage import ProbeConfig, ProbeResult, run_probe

__all__ = ["Check", "ProbeConfig", "ProbeResult", "Settings", "run_probe"]
