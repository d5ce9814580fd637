#!/usr/bin/env bash
# llama.cpp's own C++ server and quantizer (llama-server, llama-quantize and the shared libraries they load),
# built from the vendored llama.cpp of the llama-cpp-python sdist that pyproject.toml pins, so the suite's two
# llama.cpp servers run one llama.cpp version (llama-cpp-python is installed without a build of its own and
# loads these libraries: LLAMA_CPP_LIB_PATH).
#
# usage: build_llama_cpp.sh DIR   -> DIR/bin/llama-server, DIR/bin/llama-quantize, DIR/bin/lib*.so
#
# Instruction sets: what this CPU lists in /proc/cpuinfo, named one by one rather than -march=native, and
# AMX always off: a CPU may advertise instructions its VM cannot run (a native build here died with SIGILL
# at its first long prompt, in AMX code). The programs find the libraries beside them ($ORIGIN). The flags
# are the cache key: DIR/flags holds the last build's, and a build with other flags (another CPU, another
# pin) starts from scratch. ~7 min on 2 cores.
set -euo pipefail

dir=${1:?usage: build_llama_cpp.sh DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
version=$(grep -o 'llama-cpp-python\[server\]==[0-9.]*' "$root/pyproject.toml" | cut -d= -f3)
python=${PYTHON:-python3}

has() { grep -qw "$1" /proc/cpuinfo; }
onoff() { if has "$1"; then echo ON; else echo OFF; fi; }
flags="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DGGML_NATIVE=OFF -DGGML_OPENMP=ON"
flags+=" -DGGML_AVX=$(onoff avx) -DGGML_AVX2=$(onoff avx2) -DGGML_FMA=$(onoff fma) -DGGML_F16C=$(onoff f16c)"
flags+=" -DGGML_BMI2=$(onoff bmi2) -DGGML_AVX512=$(onoff avx512f) -DGGML_AVX512_VBMI=$(onoff avx512vbmi)"
flags+=" -DGGML_AVX512_VNNI=$(onoff avx512_vnni) -DGGML_AVX512_BF16=$(onoff avx512_bf16)"
flags+=" -DGGML_AVX_VNNI=$(onoff avx_vnni)"
flags+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
flags+=" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
key="llama-cpp-python==$version $flags"

if [[ -x $dir/bin/llama-server && -x $dir/bin/llama-quantize && "$(cat "$dir/flags" 2>/dev/null)" == "$key" ]]; then
    exit 0  # built already, with these flags
fi

echo "building llama.cpp's llama-server from llama-cpp-python==$version's sdist (~7 min on 2 cores)" >&2
rm -rf "$dir"
mkdir -p "$dir/src"
"$python" -m pip download -q --no-deps --no-binary :all: --no-cache-dir "llama-cpp-python==$version" -d "$dir/src"
tar -xzf "$dir/src/llama_cpp_python-$version.tar.gz" -C "$dir/src"
source=$dir/src/llama_cpp_python-$version/vendor/llama.cpp
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# shellcheck disable=SC2086  # $flags is a list of words
cmake -S "$source" -B "$dir/build" "${generator[@]}" $flags >"$dir/cmake.log"
cmake --build "$dir/build" --parallel "$(nproc)" --target llama-server llama-quantize >>"$dir/cmake.log"
mkdir -p "$dir/bin"
cp -a "$dir/build/bin/." "$dir/bin/"
rm -rf "$dir/build" "$dir/src"  # ~1 GB of objects and sources; bin/ is all the suite runs
echo "$key" >"$dir/flags"
