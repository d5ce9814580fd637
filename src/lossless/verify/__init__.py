"""Is the candidate endpoint still the same model as the baseline? A verdict with its evidence.

options.py     ``VerifyOptions``: what verify was asked, every default
run.py         ``run()``: two endpoints (two embedded servers when no URLs) -> ``VerifyResult``
budget.py      ``Budget``, ``Criteria``: the most one run spends, in looks; the error rates spent over them;
               what a budget can show (no numpy: --help reads it)
detect.py      ``detect()``: what each endpoint supports (scoring, log-probabilities, neutral sampler)
collect.py     ``Caller``: sampled completions, teacher-forced scores, greedy answers, bundled tasks
evidence.py    ``gather()``: both endpoints -> ``Evidence`` after each look (failed requests kept as data)
paired_tokens.py  ``pair_tokens()``: the same tokens of greedy answers scored by both, per prompt
distance.py    ``estimate()``: those pairs -> ``LogprobDistance``, tested against the tolerance
taskset.py     ``run_tasks()``: verify --tasks: a task set run greedily on both, tool-call parity
two_sample.py  ``compare_sets()``: stratified permutation tests (MMD-Hamming, first token, KS, scores), Holm
judge.py       ``judge()``: Evidence -> findings
decide.py      ``decide()``: one look's numbers -> equivalent / different / inconclusive, or more samples
result.py      ``VerifyConfig``, ``VerifyResult``, ``Procedure`` (the look it stopped at, the error rates)

collect.py has inspect's collect.py's role: what the command asks endpoints.
"""
