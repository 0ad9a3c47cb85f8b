#!/usr/bin/env bash
# Builds what a device call carries to a bare CUDA machine (CUDA torch and numpy, no package
# index), in the repository root, both git-ignored:
#   .whl/      the pure wheels gpu_call.sh installs: gymnasium, tyro, rsl_rl and their deps
#   .envpool/  EnvPool for Atari alone, ready for PYTHONPATH: the wheel with every suite is
#              64 MB (the carry limit), this copy about 9 MB (its Atari module, the ROMs, the
#              Python deps it imports: dm-env, absl, dm-tree, optree)
#
#   bash peers/gpu_carry.sh [PYTHON_VERSION]    # default 3.12, the device's Python
#
# then a device call carries both: carry [".whl", ".envpool"], command
# "bash peers/gpu_call.sh OUT_DIR atari:540". EnvPool 1.2.7 is the first with a cp312 wheel
# (1.2.5, the extra's pin, has none); its Atari API is the one envs/envpool_atari.py uses.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.12}
pip=${PIP:-.venv/bin/pip}
get() {  # get DEST [pip download args]: wheels for the device's Python, no dependencies
    local dest=$1
    shift
    "$pip" download -q --no-deps --only-binary=:all: --python-version "$version" \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$dest" "$@"
}
rm -rf .whl .envpool
mkdir -p .whl .envpool
get .whl -c constraints.txt gymnasium farama-notifications tyro docstring-parser shtab \
    typeguard rsl-rl-lib orjson pyvers importlib-metadata gitpython gitdb smmap
get .whl tensordict==0.11.0  # rsl_rl's; the version that ran with the device's torch 2.x

dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
get "$dl" envpool==1.2.7 envpool-assets==0.4.1
get "$dl" -c constraints.txt dm-env absl-py dm-tree optree
cd .envpool
unzip -q "$dl"/envpool-1.2.7-*.whl 'envpool/__init__.py' 'envpool/registration.py' \
    'envpool/py.typed' 'envpool/python/*' 'envpool/atari/*'
unzip -q "$dl"/envpool_assets-*.whl 'envpool_assets/__init__.py' 'envpool_assets/atari/*'
for w in dm_env absl_py dm_tree optree; do
    unzip -q -o "$dl"/$w-*.whl -x '*.dist-info/*'
done
# the package's entry point imports every suite's registration; this copy has Atari's alone
printf '"""Registration: Atari only (this copy leaves the other suites out)."""\n\n%s\n' \
    'import envpool.atari.registration  # noqa: F401' >envpool/entry.py
cd ..
echo "built .whl ($(du -sh .whl | cut -f1)) and .envpool ($(du -sh .envpool | cut -f1))"
