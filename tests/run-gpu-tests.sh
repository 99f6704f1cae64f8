#!/bin/sh
# Run every CUDA test program ($BUILD/tests-gpu/test_*) and print the totals
# as the last line: "N passed, N failed, M skipped" (as tests/run-tests.sh does). The
# CUDA parity test runs twice: as is (cuBLAS when it loads) and with
# NTX_NO_CUBLAS=1 for its matmul part (our own tensor-core GEMM); the PDL
# test runs again with NTX_NO_PDL=1 (the switch must turn PDL off).
# Needs a GPU: without one it says "no CUDA device" and exits 1, since
# `make test-gpu` is only run on GPU machines.
BUILD=${BUILD:-build}
. "$(dirname "$0")/tap-count.sh"

set -- "$BUILD"/tests-gpu/test_*
if [ ! -x "$1" ]; then
	echo "not ok - no GPU test programs in $BUILD/tests-gpu (was nvcc found at build time?)"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi
if ! "$1" --probe; then
	echo "no CUDA device"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi

run() { # $1 = name, then the command
	name=$1
	shift
	echo "# gpu: $name"
	"$@" >"$log" 2>&1
	rc=$?
	grep -E '^(not ok|# )' "$log"
	count "$log" "$rc" "$name"
}

for t in "$BUILD"/tests-gpu/test_*; do
	[ -x "$t" ] || continue
	run "$(basename "$t")" "$t"
done
if [ -x "$BUILD/tests-gpu/test_cuda_kernels" ]; then
	run "test_cuda_kernels (NTX_NO_CUBLAS=1, matmul only)" \
		env NTX_NO_CUBLAS=1 "$BUILD/tests-gpu/test_cuda_kernels" --matmul-only
fi
if [ -x "$BUILD/tests-gpu/test_cuda_pdl" ]; then
	run "test_cuda_pdl (NTX_NO_PDL=1)" env NTX_NO_PDL=1 "$BUILD/tests-gpu/test_cuda_pdl"
fi

totals
[ "$fail" -eq 0 ]
