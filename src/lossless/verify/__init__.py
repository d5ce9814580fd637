"""Is the candidate endpoint still the same model as the baseline? A verdict with its evidence.

collect.py   sampled completions, teacher-forced scores, greedy answers, bundled tasks (tasks.jsonl)
stats.py     stratified permutation tests (MMD-Hamming, first-token chi-square, KS, teacher-forced mean
             score, rank and tail share), Holm, TOST
decide.py    the numbers -> equivalent / different / inconclusive, with reasons
stage.py     VerifyConfig -> VerifyResult (two embedded servers when no URLs), table and JSON
"""

from lossless.verify.stage import BUDGETS, Budget, VerifyConfig, VerifyResult, run_verify

__all__ = ["BUDGETS", "Budget", "VerifyConfig", "VerifyResult", "run_verify"]
