"""What to set, from what was measured: time-outs, hedging and failover, predicted from a run's records.

options.py    ``AdviseOptions``: what advise was asked, every default
run.py        ``run()``: bench --out folders -> ``AdviseResult`` (report/advise.py renders it)
simulate.py   measured attempts -> policies (one attempt, hedge, failover chain) simulated by resampling
recommend.py  ``timeout()``: the time-out rule; which hedge and failover delays to simulate
executed.py   ``executed()``: what a run made under a policy (bench --hedge-after, --failover) measured
result.py     ``AdviseResult`` and its parts; as_dict at the JSON edge
"""
