"""Is the candidate endpoint still the same model as the baseline? A verdict with its evidence.

budget.py    how much one run spends (prompts, samples, tokens, tasks); no numpy, for the CLI's --help
detect.py    what each endpoint supports (scoring, log-probabilities, neutral sampler fields)
collect.py   sampled completions, teacher-forced scores, greedy answers, bundled tasks (tasks.jsonl)
evidence.py  both endpoints -> Evidence (failed requests kept as data)
stats.py     stratified permutation tests (MMD-Hamming, first-token chi-square, KS, teacher-forced mean
             score, rank and tail share), Holm, TOST
judge.py     Evidence -> findings; decide.py: the numbers -> equivalent / different / inconclusive
result.py    VerifyConfig and the typed VerifyResult
stage.py     VerifyOptions -> VerifyResult (two embedded servers when no URLs); report/verify.py renders it
"""
