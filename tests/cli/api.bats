#!/usr/bin/env bats
# The public C API from the outside: examples/example.c prints what ntx-run
# prints, libntx.so exports exactly the calls of include/ntx.h under the
# soname libntx.so.0, and `make install` gives a tree that pkg-config and a
# C compiler can build the example against (doc/libntx.md).

bats_require_minimum_version 1.5.0

load install_helpers

setup() {
	cd "$BATS_TEST_DIRNAME/../.."
	T="$BATS_TEST_TMPDIR"
	Q4=models/tinymodel-q4_k_m.gguf
	build=$(dirname "$NTX_BIN")
	# the suite's version (lib/base/version.h): the .so's and pkg-config's
	ver=$(sed -n 's/^#define NTX_VERSION "\(.*\)"/\1/p' lib/base/version.h)
}

@test "ntx-example prints what ntx-run -n 16 --temp 0 prints" {
	for p in "Once upon a time" "The little dog"; do
		run -0 "$NTX_BIN/ntx-run" -m "$Q4" -p "$p" -n 16 --temp 0 -q
		want=$output
		run -0 "$NTX_BIN/ntx-example" "$Q4" "$p"
		[ -n "$output" ]
		[ "$output" = "$want" ] || {
			echo "example: '$output'" >&2
			echo "ntx-run: '$want'" >&2
			return 1
		}
	done
}

@test "ntx-example: usage 2, a missing model 1 with the library's message" {
	run -2 "$NTX_BIN/ntx-example" "$Q4"
	[[ "$output" == *"usage:"* ]]
	run -1 "$NTX_BIN/ntx-example" no/such.gguf hello
	[ "$output" = "$NTX_BIN/ntx-example: no/such.gguf: No such file or directory" ]
}

@test "libntx.so: soname libntx.so.0, exports exactly the calls of ntx.h" {
	[ "$(readlink "$build/libntx.so")" = libntx.so.0 ]
	[ "$(readlink "$build/libntx.so.0")" = libntx.so.$ver ]
	readelf -d "$build/libntx.so.$ver" | grep -q 'Library soname: \[libntx.so.0\]'
	nm -D --defined-only "$build/libntx.so.$ver" | awk '$2 ~ /^[TWDBR]$/ { print $3 }' |
		sort >"$T/exported"
	grep -oE '\bntx_[a-z_]+\(' include/ntx.h | tr -d '(' | sort -u >"$T/declared"
	[ -s "$T/declared" ]
	diff "$T/declared" "$T/exported"
}

@test "make install PREFIX=DIR: ntx.h, libntx.a, libntx.so*, ntx.pc; the example builds with pkg-config" {
	command -v pkg-config >/dev/null || skip "no pkg-config (run scripts/setup)"
	p="$T/prefix"
	run -0 install_private PREFIX="$p"
	[ -f "$p/include/ntx.h" ]
	[ -f "$p/lib/libntx.a" ]
	[ -f "$p/lib/libntx.so.$ver" ]
	[ "$(readlink "$p/lib/libntx.so.0")" = libntx.so.$ver ]
	[ "$(readlink "$p/lib/libntx.so")" = libntx.so.0 ]
	grep -qx "prefix=$p" "$p/lib/pkgconfig/ntx.pc"
	export PKG_CONFIG_PATH="$p/lib/pkgconfig"
	run -0 pkg-config --modversion ntx
	[ "$output" = "$ver" ]
	flags=$(pkg-config --cflags --libs ntx)
	[[ "$flags" == *"-I$p/include"* ]]
	# only the installed header: a copy of the example outside the tree
	cp examples/example.c "$T/example.c"
	run -0 ${CC:-cc} -std=c11 -Wall -Wextra -Werror "$T/example.c" $flags -o "$T/example"
	readelf -d "$T/example" | grep -q 'Shared library: \[libntx.so.0\]'
	run -0 "$NTX_BIN/ntx-run" -m "$Q4" -p "Once upon a time" -n 16 --temp 0 -q
	want=$output
	LD_LIBRARY_PATH="$p/lib" run -0 "$T/example" "$Q4" "Once upon a time"
	[ "$output" = "$want" ]
}
