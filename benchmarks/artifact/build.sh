#!/usr/bin/env bash
# Build our timing driver (driver.cu) against the paper's own CUDA code
# (asmelko/jpdc23-artifact, repo/cross-corr), fetched separately and never vendored here.
#
#   bash benchmarks/artifact/build.sh ARTIFACT_SRC_DIR BUILD_DIR
#
# ARTIFACT_SRC_DIR: the artifact's cross-corr folder (the one holding src/) or its src/ itself.
# BUILD_DIR: where the patched copy of the sources, the objects and the binary
#            BUILD_DIR/artifact_driver go. The artifact checkout itself is never modified.
#
# What it does:
#  * copies the artifact's src/ into BUILD_DIR/src and, in that copy only, guards the three
#    cuFFT status codes CUDA 13 removed (CUFFT_INCOMPLETE_PARAMETER_LIST, CUFFT_PARSE_ERROR,
#    CUFFT_LICENSE_ERROR) in fft_helpers.hpp with `#if CUFFT_VERSION < 12000`;
#  * compiles only the kernel files the driver uses (no CMake, no Boost, no nlohmann/json), all
#    at once in the background, each with --split-compile so a 16-core machine is kept busy;
#  * passes small template-instantiation limits (the artifact's own macros) to every object;
#  * links BUILD_DIR/artifact_driver with cudart and cuFFT.
# Re-running is incremental: objects are rebuilt only when their inputs or the flags change.
#
# Environment overrides: NVCC, ARCH (default 90), CUFFT_INC / CUFFT_LIB (folders holding
# cufft.h / libcufft.so*), JOBS_THREADS (--split-compile value, default 0 = all CPUs), and any
# of the *_LIMIT variables listed below.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 ARTIFACT_SRC_DIR BUILD_DIR" >&2
    exit 2
fi
ART="$1"
BUILD="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
t_start=$(date +%s)

if [[ -f "$ART/src/kernels.cuh" ]]; then
    ART_SRC="$ART/src"
elif [[ -f "$ART/kernels.cuh" ]]; then
    ART_SRC="$ART"
else
    echo "build.sh: no kernels.cuh in $ART or $ART/src (expected the artifact's repo/cross-corr)" >&2
    exit 2
fi

# ------------------------------------------------------------------ toolchain
NVCC="${NVCC:-$(command -v nvcc || true)}"
if [[ -z "$NVCC" ]]; then
    for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
        [[ -x "$c" ]] && NVCC="$c" && break
    done
fi
[[ -n "$NVCC" && -x "$NVCC" ]] || { echo "build.sh: nvcc not found (set NVCC)" >&2; exit 2; }
CUDA_ROOT="$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)"
if [[ ! -d "$CUDA_ROOT/include" || ! -f "$CUDA_ROOT/include/cuda_runtime.h" ]]; then
    # nvcc may be a wrapper script; ask it where the toolkit is
    here="$("$NVCC" --dryrun -c -x cu /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n1 || true)"
    if [[ -n "$here" && -d "$here/.." ]]; then CUDA_ROOT="$(cd "$here/.." && pwd)"; fi
fi
ARCH="${ARCH:-90}"

find_cufft() {
    local d
    if [[ -n "${CUFFT_INC:-}" ]]; then
        return 0
    fi
    for d in "$CUDA_ROOT/include" "$CUDA_ROOT"/targets/*/include /usr/local/cuda/include /usr/include; do
        if [[ -f "$d/cufft.h" ]]; then
            CUFFT_INC="$d"
            return 0
        fi
    done
    # pip wheels (nvidia-cufft for CUDA 13 puts it under nvidia/cu13, older ones under nvidia/cufft)
    local py
    for py in python3 python; do
        command -v "$py" >/dev/null 2>&1 || continue
        d="$("$py" - <<'EOF' 2>/dev/null || true
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
for r in roots:
    for pat in ("nvidia/cu13/include/cufft.h", "nvidia/cufft/include/cufft.h", "nvidia/*/include/cufft.h"):
        for f in glob.glob(os.path.join(r, pat)):
            print(os.path.dirname(f)); sys.exit(0)
EOF
)"
        if [[ -n "$d" ]]; then
            CUFFT_INC="$d"
            return 0
        fi
    done
    return 1
}
HAVE_CUFFT=1
if ! find_cufft; then
    echo "build.sh: WARNING: cufft.h not found; building without the cuFFT path (set CUFFT_INC and CUFFT_LIB)" >&2
    HAVE_CUFFT=0
    CUFFT_INC=""
fi
if [[ $HAVE_CUFFT == 1 && -z "${CUFFT_LIB:-}" ]]; then
    for d in "$(dirname "$CUFFT_INC")/lib64" "$(dirname "$CUFFT_INC")/lib" "$CUDA_ROOT/lib64" "$CUDA_ROOT"/targets/*/lib \
             /usr/lib/x86_64-linux-gnu /usr/lib64; do
        if compgen -G "$d/libcufft.so*" >/dev/null; then
            CUFFT_LIB="$d"
            break
        fi
    done
fi
if [[ $HAVE_CUFFT == 1 && -z "${CUFFT_LIB:-}" ]]; then
    echo "build.sh: WARNING: libcufft.so not found; building without the cuFFT path (set CUFFT_LIB)" >&2
    HAVE_CUFFT=0
    CUFFT_INC=""
fi
CUFFT_LINK=()
INC_CUFFT=()
if [[ $HAVE_CUFFT == 0 ]]; then
    :
elif [[ -e "$CUFFT_LIB/libcufft.so" ]]; then
    CUFFT_LINK=(-L"$CUFFT_LIB" -lcufft)
else
    libs=("$CUFFT_LIB"/libcufft.so.*)  # e.g. libcufft.so.12 from a pip wheel, no unversioned link
    CUFFT_LINK=(-L"$CUFFT_LIB" -Xlinker "-l:$(basename "${libs[0]}")")
fi
if [[ $HAVE_CUFFT == 1 ]]; then
    CUFFT_LINK+=(-Xlinker -rpath -Xlinker "$CUFFT_LIB")
    INC_CUFFT=(-I"$CUFFT_INC")
fi

# ------------------------------------------------------------------ template limits
# The artifact instantiates every value 1..LIMIT of each kernel parameter (a product over the
# parameters), so these drive the build time. Release defaults in its CMakeLists are up to 8;
# ours are <= 4 to keep the build to about a minute on 16 cores.
LIMIT_VARS=(
    SHUFFLE_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT=4
    SHUFFLE_MULTIROW_RIGHT_RIGHT_ROWS_LIMIT=1
    SHUFFLE_MULTIROW_BOTH_SHIFTS_PER_THREAD_LIMIT=4
    SHUFFLE_MULTIROW_BOTH_LEFT_ROWS_LIMIT=4
    SHUFFLE_MULTIROW_BOTH_LOCAL_MEM_SHIFTS_PER_THREAD_LIMIT=1
    SHUFFLE_MULTIROW_BOTH_LOCAL_MEM_LEFT_ROWS_LIMIT=1
    SHUFFLE_MULTIROW_RIGHT_MULTIMAT_RIGHT_RIGHT_ROWS_LIMIT=1
    SHUFFLE_MULTIROW_RIGHT_MULTIMAT_RIGHT_RIGHT_MATS_LIMIT=1
    SHUFFLE_N_TO_M_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT=4
    SHUFFLE_N_TO_M_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT=4
    SHUFFLE_N_TO_M_MULTIMAT_BOTH_LOCAL_MEM_LEFT_MATRICES_PER_THREAD_LIMIT=1
    SHUFFLE_N_TO_M_MULTIMAT_BOTH_LOCAL_MEM_RIGHT_MATRICES_PER_THREAD_LIMIT=1
    SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_SHIFTS_PER_THREAD_PER_RIGHT_MATRIX_LIMIT=2
    SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT=2
    SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT=2
    SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_ROWS_PER_ITERATION_LIMIT=2
    SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_SHIFTS_PER_RIGHT_MATRIX_LIMIT=4
    SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT=4
    SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_LEFT_ROWS_PER_ITERATION_LIMIT=4
    WARP_PER_SHIFT_SHARED_MEM_RIGHT_MATRICES_PER_BLOCK_LIMIT=4
)
DEFS=()
for kvp in "${LIMIT_VARS[@]}"; do
    name="${kvp%%=*}"
    val="${!name:-${kvp#*=}}"
    DEFS+=("-D$name=$val")
done

# The artifact's kernel sources the driver calls into, largest first (they are built in parallel).
KERNELS=(
    naive_shuffle_one_to_many_multirow_both_multimat_right.cu
    naive_shuffle_n_to_m_multimat_both.cu
    naive_shuffle_n_to_m_multirow_both_multimat_both.cu
    naive_shuffle_multirow_both.cu
    naive_warp_per_shift_shared_mem.cu
    naive_shuffle_multimat_right.cu
    naive_warp_per_shift.cu
    naive_shuffle.cu
    naive_original.cu
    kernel_args.cpp
    row_distribution.cpp
)

if [[ $HAVE_CUFFT == 1 ]]; then KERNELS+=(hadamard.cu); fi

FLAGS=(-arch=sm_"$ARCH" -O3 -std=c++17 -t 0 --split-compile="${JOBS_THREADS:-0}" -diag-suppress 177,550,2361
       -Xcompiler -w "${DEFS[@]}")
if [[ $HAVE_CUFFT == 0 ]]; then FLAGS+=(-DARTIFACT_NO_CUFFT); fi

# ------------------------------------------------------------------ patched copy of the sources
mkdir -p "$BUILD/src" "$BUILD/obj"
BUILD="$(cd "$BUILD" && pwd)"
stage="$(mktemp -d "$BUILD/.stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
cp "$ART_SRC"/*.cu "$ART_SRC"/*.cuh "$ART_SRC"/*.hpp "$ART_SRC"/*.cpp "$stage"/
# CUDA 13 fix, on the copy only.
sed -i -E '/^[[:space:]]*case CUFFT_(INCOMPLETE_PARAMETER_LIST|PARSE_ERROR|LICENSE_ERROR):/{i\
#if defined(CUFFT_VERSION) \&\& CUFFT_VERSION < 12000
N
a\
#endif
}' "$stage/fft_helpers.hpp"
n_guarded=$(grep -c '^#if defined(CUFFT_VERSION) && CUFFT_VERSION < 12000' "$stage/fft_helpers.hpp" || true)
if [[ "$n_guarded" != 3 ]]; then
    echo "build.sh: warning: expected to guard 3 cuFFT status codes in fft_helpers.hpp, guarded $n_guarded" >&2
fi

headers_changed=0
for f in "$stage"/*; do
    b="$(basename "$f")"
    if ! cmp -s "$f" "$BUILD/src/$b"; then
        cp "$f" "$BUILD/src/$b"
        case "$b" in *.cuh | *.hpp) headers_changed=1 ;; esac
    fi
done

config="$("$NVCC" --version | tail -n1) | ${FLAGS[*]} | ${CUFFT_INC:-no cuFFT}"
if [[ ! -f "$BUILD/.config" ]] || [[ "$(cat "$BUILD/.config")" != "$config" ]] || [[ $headers_changed == 1 ]]; then
    rm -f "$BUILD"/obj/*.o "$BUILD/artifact_driver"
fi
echo "$config" >"$BUILD/.config"  # objects are only kept (renamed from .tmp) once compiled with it

# ------------------------------------------------------------------ compile (parallel) and link
echo "build.sh: $("$NVCC" --version | grep -o 'release [0-9.]*' || true), sm_$ARCH, $(nproc) CPUs, cuFFT: ${CUFFT_INC:-none}" >&2
pids=()
names=()
for k in "${KERNELS[@]}"; do
    obj="$BUILD/obj/${k%.*}.o"
    if [[ -f "$obj" && "$obj" -nt "$BUILD/src/$k" ]]; then
        continue
    fi
    lang=()
    [[ "$k" == *.cpp ]] && lang=(-x cu)
    (
        t0=$(date +%s)
        "$NVCC" "${FLAGS[@]}" "${lang[@]}" -I"$BUILD/src" "${INC_CUFFT[@]}" -c "$BUILD/src/$k" -o "$obj.tmp" >"$BUILD/obj/${k%.*}.log" 2>&1 &&
            mv "$obj.tmp" "$obj" && echo "build.sh:   $k $(($(date +%s) - t0)) s" >&2
    ) &
    pids+=($!)
    names+=("$k")
done
obj="$BUILD/obj/driver.o"
if [[ ! -f "$obj" || "$HERE/driver.cu" -nt "$obj" ]]; then
    (
        t0=$(date +%s)
        "$NVCC" "${FLAGS[@]}" -I"$BUILD/src" "${INC_CUFFT[@]}" -c "$HERE/driver.cu" -o "$obj.tmp" >"$BUILD/obj/driver.log" 2>&1 &&
            mv "$obj.tmp" "$obj" && echo "build.sh:   driver.cu $(($(date +%s) - t0)) s" >&2
    ) &
    pids+=($!)
    names+=(driver.cu)
fi
failed=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "build.sh: FAILED ${names[$i]}; log:" >&2
        tail -n 30 "$BUILD/obj/$(basename "${names[$i]%.*}").log" >&2 || true
        failed=1
    fi
done
[[ $failed == 0 ]] || exit 1

objs=("$BUILD/obj/driver.o")
for k in "${KERNELS[@]}"; do objs+=("$BUILD/obj/${k%.*}.o"); done
relink=0
[[ -x "$BUILD/artifact_driver" ]] || relink=1
for o in "${objs[@]}"; do [[ "$o" -nt "$BUILD/artifact_driver" ]] && relink=1; done
if [[ $relink == 1 ]]; then
    "$NVCC" -arch=sm_"$ARCH" "${objs[@]}" -o "$BUILD/artifact_driver" "${CUFFT_LINK[@]}"
fi
echo "build.sh: $BUILD/artifact_driver ready in $(($(date +%s) - t_start)) s" >&2
