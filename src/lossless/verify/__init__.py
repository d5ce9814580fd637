"""Is the candidate endpoint still the same model as the baseline? A verdict with its evidence.

options.py     ``VerifyOptions``: what verify was asked, every default
run.py         ``run()``: two endpoints (two embedded servers when no URLs) -> ``VerifyResult``
budget.py      ``Budget``: how much one run spends (prompts, samples, tokens, tasks); no numpy, for --help
detect.py      ``detect()``: what each endpoint supports (scoring, log-probabilities, neutral sampler)
collect.py     ``Caller``: sampled completions, teacher-forced scores, greedy answers, bundled tasks
evidence.py    ``gather()``: both endpoints -> ``Evidence`` (failed requests kept as data)
taskset.py     ``run_tasks()``: verify --tasks: a task set run greedily on both, tool-call parity
two_sample.py  ``compare()``: stratified permutation tests (MMD-Hamming, first token, KS, scores), Holm
judge.py       ``judge()``: Evidence -> findings
decide.py      ``decide()``: the numbers -> equivalent / different / inconclusive
result.py      ``VerifyConfig``, ``VerifyResult``

collect.py has inspect's collect.py's role: what the command asks endpoints.
"""
