#!/usr/bin/env bash
# cuda-toolkit.sh DIR: CUDA's compiler and libraries for rehearsing the GPU
# check's build on a machine without a GPU or NVIDIA's installer (make
# gpu-check-build). It fetches Debian 13's non-free nvidia-cuda-toolkit
# 12.4.1 packages and the CCCL headers from deb.debian.org at pinned
# paths, checks each against its SHA256 (from trixie's Packages indexes),
# unpacks them under DIR/root
# with dpkg-deb -x (never installed) and lays them out as NVIDIA's
# installer does, in DIR/cuda: bin/nvcc with an nvcc.profile that finds
# the rest relative to it, nvvm/, include/, lib64/ (with lib64/stubs), and
# driver/libcuda.so.1, the toolkit's stub of the driver library, for ldd.
# About 1.3 GB to fetch and 3.3 GB unpacked. Idempotent: a DIR/cuda made
# from the same packages is kept.
set -euo pipefail

DIR=${1:?usage: cuda-toolkit.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
T=$DIR/cuda
for c in curl dpkg-deb sha256sum; do command -v $c >/dev/null || { echo "cuda-toolkit.sh needs $c" >&2; exit 1; }; done

# sha256 and path, from trixie's Packages indexes
# (http://deb.debian.org/debian/dists/trixie/{non-free,main}/binary-amd64/Packages.xz):
# the toolkit from non-free, and the CUDA C++ core libraries (CCCL: libcu++,
# CUB, Thrust), which the CUDA headers include, from main.
MIRROR=http://deb.debian.org/debian
TK=pool/non-free/n/nvidia-cuda-toolkit
CCCL=pool/main/c/cccl
DEBS="
cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319 $TK/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb
d846838f914a0176948d48a8bcade5d6dbcccb5c9374343f6475f5503f173ee0 $TK/nvidia-cuda-dev_12.4.127~12.4.1-2_amd64.deb
361b3721cf84bf068e111ff013c819de61cb475268b0d38db99839471f1b4130 $TK/libcudart12_12.4.127~12.4.1-2_amd64.deb
2ddc22809d16b157021a4d57db6b2221cf7c46f42654c95df86ce73beb15c1f7 $TK/libcublas12_12.4.5.8~12.4.1-2_amd64.deb
2f67754a6dd7095de1a5c4503f20539981f31f0cd627565973c547e997fc7732 $TK/libcublaslt12_12.4.5.8~12.4.1-2_amd64.deb
3c905c1df7453e1ad477516c4465629c310d2f58a796d66f44070dc289e7ec12 $TK/libnvvm4_12.4.131~12.4.1-2_amd64.deb
230ab96954cfc1fcc8eda7fe0fe9849a177cd80c62fe69b8b6966e6ef7bf26fd $TK/libnvjitlink12_12.4.127~12.4.1-2_amd64.deb
30e911c1909265591b5ea793df0e49e56bed631238b68b3e75c97590c4985686 $CCCL/libcu++-dev_2.3.2-2_all.deb
4a7e7c24ef2994140e47dba59507db60e281f968f17c18cf1cadc9c27c17c26b $CCCL/libcub-dev_2.3.2-2_all.deb
61fe44b65834efad9b079452ebec7396d4b37712d251421f4218b3bc652a3147 $CCCL/libthrust-dev_2.3.2-2_all.deb
"
[ "$(cat "$T/debs.txt" 2>/dev/null)" != "$(echo "$DEBS")" ] || { echo "$T: there already"; exit 0; }
mkdir -p "$DIR/debs"
rm -rf "$DIR/root"
while read -r sum path; do
	[ -n "$path" ] || continue
	f=${path##*/}
	deb=$DIR/debs/$f
	if ! echo "$sum  $deb" | sha256sum -c --quiet >/dev/null 2>&1; then
		curl -sSfL -o "$deb" "$MIRROR/$path"
		echo "$sum  $deb" | sha256sum -c --quiet || { rm -f "$deb"; echo "$f: SHA256 differs from the pinned one" >&2; exit 1; }
	fi
	dpkg-deb -x "$deb" "$DIR/root"
done <<<"$DEBS"

# NVIDIA's layout over Debian's: Debian puts nvcc and cicc in
# /usr/lib/nvidia-cuda-toolkit/bin, the other tools in /usr/bin, headers in
# /usr/include and libraries in /usr/lib/x86_64-linux-gnu. nvcc reads the
# nvcc.profile beside its own binary, so the binary is copied, not linked.
R=$DIR/root/usr
rm -rf "$T" && mkdir -p "$T/bin" "$T/nvvm/bin" "$T/nvvm/lib64" "$T/driver"
cp "$R/lib/nvidia-cuda-toolkit/bin/nvcc" "$T/bin/"
cp -r "$R/lib/nvidia-cuda-toolkit/bin/crt" "$T/bin/"
for b in ptxas fatbinary nvlink cudafe++ bin2c nvprune cuobjdump; do ln -s "$R/bin/$b" "$T/bin/$b"; done
ln -s "$R/lib/nvidia-cuda-toolkit/bin/cicc" "$T/nvvm/bin/cicc"
ln -s "$R/lib/nvidia-cuda-toolkit/libdevice" "$T/nvvm/libdevice"
ln -s "$R"/lib/x86_64-linux-gnu/libnvvm.so* "$T/nvvm/lib64/"
ln -s "$R/include" "$T/include"
ln -s "$R/lib/x86_64-linux-gnu" "$T/lib64"
ln -s "$R/lib/x86_64-linux-gnu/stubs/libcuda.so" "$T/driver/libcuda.so.1"
cat >"$T/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
echo "$DEBS" >"$T/debs.txt"
"$T/bin/nvcc" --version | tail -n 2
