"""What to set, from what was measured: time-outs, hedging and failover, predicted from a run's records.

simulate.py   measured attempts -> policies (one attempt, hedge, failover chain) simulated by resampling
recommend.py  the time-out rule, and which hedge and failover delays to simulate
result.py     the typed AdviseResult and its parts; as_dict at the JSON edge
stage.py      AdviseOptions -> AdviseResult (reads bench --out folders); report/advise.py renders it
"""
