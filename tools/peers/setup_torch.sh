#!/usr/bin/env bash
# tools/peers/setup_torch.sh: installs the current PyTorch from PyPI into a virtual environment of its own,
# outside the repository, for the CPU benchmarks' peers (model/train_step_benchmark, the attention and MoE
# benchmarks, tools/peers/torch_sweep.py). The benchmarks find it by themselves (kernels/testing/cpu_peer.h:
# LMF_TORCH_PYTHON, else this venv's python, else Debian's /usr/bin/python3 with its PyTorch 1.13).
#
#   tools/peers/setup_torch.sh            # PyTorch 2.15.0 into ~/.cache/lmforge/torch-venv
#   LMF_TORCH_VERSION=2.14.1 tools/peers/setup_torch.sh
#   env: LMF_TORCH_VENV (the venv), LMF_TORCH_WHEELS (the wheel cache), LMF_TORCH_VERSION (2.15.0),
#        LMF_TORCH_BASE_PYTHON (the python the venv is made from: /usr/bin/python3)
#
# The download is large: PyPI's Linux torch wheel is the CUDA build, 0.54 GB, and it will not import without
# its NVIDIA CUDA packages (libtorch links libcufile, libcusparseLt, libnvshmem, cuDNN, cuBLAS, ...), even on
# a machine without a GPU, so the whole set is installed as `pip install torch` would: 2.9 GB of wheels
# (kept in LMF_TORCH_WHEELS, so a venv made again downloads nothing) and about 6 GB installed. PyPI has no
# CPU-only torch wheel. The script checks the free space before it starts. Running it again with the same
# version does nothing but the final check. Delete LMF_TORCH_WHEELS to get the 2.9 GB back. The venv's
# torch.compile links its kernels against the venv's own libtorch (configure_inductor), and the final check
# fails unless inductor finds a vector ISA.
set -euo pipefail

version="${LMF_TORCH_VERSION:-2.15.0}"
cache="${HOME}/.cache/lmforge"
venv="${LMF_TORCH_VENV:-${cache}/torch-venv}"
wheels="${LMF_TORCH_WHEELS:-${cache}/torch-wheels}"
base_python="${LMF_TORCH_BASE_PYTHON:-/usr/bin/python3}"
need_gb=10  # wheels (2.9 GB) + the installed venv (about 6 GB), with some room

die() { echo "setup_torch.sh: $*" >&2; exit 1; }

installed_version() {
  [[ -x "${venv}/bin/python" ]] || return 0
  "${venv}/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true
}

# Free GB on the filesystem holding `path` (or its nearest existing parent).
free_gb() {
  local path="$1"
  while [[ ! -e "${path}" ]]; do path="$(dirname "${path}")"; done
  df -Pk "${path}" | awk 'NR==2 { printf "%d", $4 / 1048576 }'
}

check_tools() {
  [[ -x "${base_python}" ]] || die "LMF_TORCH_BASE_PYTHON=${base_python}: no such python"
  "${base_python}" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null ||
    die "${base_python} is older than Python 3.11, which PyTorch ${version} needs (set LMF_TORCH_BASE_PYTHON)"
  "${base_python}" -m venv --help >/dev/null 2>&1 ||
    die "${base_python} has no venv module (Debian: apt-get install python3-venv)"
  command -v g++ >/dev/null || echo "setup_torch.sh: warning: no g++ on PATH: torch.compile's CPU backend (inductor) needs a C++ compiler"
}

download() {
  local have
  have="$(ls "${wheels}"/torch-"${version}"-*.whl 2>/dev/null | head -1 || true)"
  if [[ -n "${have}" ]]; then
    echo "wheels: cached in ${wheels}"
  else
    local free
    free="$(free_gb "${cache}")"
    (( free >= need_gb )) ||
      die "${free} GB free under ${cache}; PyTorch ${version} with its CUDA packages needs about ${need_gb} GB (2.9 GB of wheels, 6 GB installed)"
    echo "downloading PyTorch ${version} and its dependencies from PyPI into ${wheels}: about 2.9 GB (the CUDA build; PyPI has no CPU-only wheel)"
    mkdir -p "${wheels}"
    "${base_python}" -m venv "${wheels}/.pip-venv"  # a pip that knows the target python's tags
    "${wheels}/.pip-venv/bin/pip" download --disable-pip-version-check -d "${wheels}" "torch==${version}" numpy
    rm -rf "${wheels}/.pip-venv"
  fi
}

install() {
  rm -rf "${venv}"
  "${base_python}" -m venv "${venv}"
  "${venv}/bin/pip" install --disable-pip-version-check --no-index --find-links "${wheels}" "torch==${version}" numpy
}

# torch.compile's C++ kernels must link against this venv's libtorch. Inductor puts the base python's LIBDIR
# (/usr/lib/x86_64-linux-gnu for Debian's python3) before torch's own lib folder on the link line, so where
# Debian's python3-torch is installed (its libtorch-dev puts libtorch_cpu.so there) the kernels link against
# PyTorch 1.13's libtorch_cpu, which lacks the Sleef symbols they call: inductor's vector-ISA probe then fails
# and every kernel is compiled scalar (torch.compile slower than eager), or a kernel from an earlier cache
# fails to load ("undefined symbol: Sleef_tanhf8_u10"). So the venv gets a compiler wrapper that names its
# torch's lib folder first (inductor reads the compiler from $CXX), set with the venv's own inductor cache
# at interpreter start by a .pth file: nothing outside the venv changes.
configure_inductor() {
  local site torch_lib
  site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  torch_lib="${site}/torch/lib"
  cat > "${venv}/bin/inductor-cxx" <<EOF2
#!/bin/sh
# setup_torch.sh: g++ with this venv's torch/lib searched first (see configure_inductor there).
exec g++ -L"${torch_lib}" "\$@"
EOF2
  chmod +x "${venv}/bin/inductor-cxx"
  echo "import os; os.environ.setdefault('CXX', '${venv}/bin/inductor-cxx'); os.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', '${venv}/inductor-cache')" \
    > "${site}/lmforge_inductor.pth"
}

# PyTorch imports, computes, compiles a small function with inductor (the C++ backend) and runs bf16 autocast.
check() {
  "${venv}/bin/python" - <<'EOF'
import torch
x = torch.randn(64, 64)
f = torch.compile(lambda a: torch.nn.functional.gelu(a @ a))
assert torch.allclose(f(x), torch.nn.functional.gelu(x @ x), atol=1e-4), "torch.compile gives another result"
from torch._inductor import cpu_vec_isa
assert cpu_vec_isa.pick_vec_isa(), ("inductor found no vector ISA it can build and load: torch.compile would "
                                    "run scalar kernels (see configure_inductor in setup_torch.sh)")
with torch.autocast("cpu", dtype=torch.bfloat16):
    assert (x @ x).dtype == torch.bfloat16
print(f"PyTorch {torch.__version__}: eager, torch.compile (inductor, vector ISA {cpu_vec_isa.pick_vec_isa()}) and "
      f"bf16 autocast work; CPU capability {torch.backends.cpu.get_cpu_capability()}")
EOF
}

main() {
  check_tools
  if [[ "$(installed_version)" != "${version}"* ]]; then
    download
    install
  else
    echo "PyTorch ${version} already installed in ${venv}"
  fi
  configure_inductor
  check
  echo "venv: ${venv} ($(du -sh "${venv}" | cut -f1)); wheels: ${wheels} ($(du -sh "${wheels}" | cut -f1))"
  echo "the benchmarks use ${venv}/bin/python by default (LMF_TORCH_PYTHON overrides it)"
}

main "$@"
