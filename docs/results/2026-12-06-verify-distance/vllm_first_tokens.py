"""Does a server draw first tokens as its own reported log-probabilities say? One prompt, N seeded
one-token draws at temperature 1 (NPER choices a request), against the top-20 log-probabilities it reports
there. Run from the repository root: python docs/results/2026-12-06-verify-distance/vllm_first_tokens.py
1500 vllm|ours (2026-12-07, 2 cores, nothing else running)."""
import sys, math, collections, concurrent.futures as cf
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks")); sys.path.insert(0, str(ROOT))
import httpx
from support import VllmServer, LosslessServer, hf_folder
from lossless import models
NPER = 1  # choices a request (n); the 10-choice run below set 10
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
PROMPT = "Once upon a time, in a small village by the sea, there lived a"
def probe(url, model):
    with httpx.Client(timeout=60, trust_env=False) as h:
        r = h.post(url + "/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 20}).json()
        top = r["choices"][0]["logprobs"]["top_logprobs"][0]
        def one(i):
            with httpx.Client(timeout=60, trust_env=False) as c:
                rr = c.post(url + "/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 1.0, "seed": 1000 + i, "n": NPER}).json()
                return [ch["text"] for ch in rr["choices"]]
        draws = []
        with cf.ThreadPoolExecutor(4) as ex:
            for got in ex.map(one, range(N // NPER)):
                draws += got
    counts = collections.Counter(draws)
    mass_top = sum(math.exp(v) for v in top.values())
    rows = sorted(top.items(), key=lambda kv: -kv[1])
    chi, seen_top = 0.0, 0
    for tok, lp in rows:
        e = len(draws) * math.exp(lp); o = counts.get(tok, 0); seen_top += o
        chi += (o - e) ** 2 / e
    e_rest = len(draws) * (1 - mass_top); o_rest = len(draws) - seen_top
    if e_rest > 0: chi += (o_rest - e_rest) ** 2 / e_rest
    print(f"draws {len(draws)}; top-20 mass reported {mass_top:.3f}, drawn {seen_top/len(draws):.3f}; chi2 {chi:.1f} on {len(rows)} df")
    for tok, lp in rows[:8]:
        print(f"   {tok!r}: reported {math.exp(lp):.3f} drawn {counts.get(tok,0)/len(draws):.3f}")
which = sys.argv[2] if len(sys.argv) > 2 else "vllm"
if which == "vllm":
    folder = hf_folder(models.resolve(), models.home() / "benchmarks" / "smollm2-hf")
    with VllmServer(folder, served_name="smollm2", threads=2) as s:
        probe(s.url, "smollm2")
else:
    with LosslessServer("--threads", "2") as s:
        probe(s.url, s.model_id)
