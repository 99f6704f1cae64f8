#!/usr/bin/env bats
# The source tree's rules that a compiler does not check: kernels never read
# the environment, the NTX_* switches are read in one place
# (lib/base/tunables.c) and documented in one place (doc/tunables.md); the
# library's parts use only earlier parts (lib/README.md, scripts/check-layers).

bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_DIRNAME/../.."
}

@test "no file under kernels/ calls getenv (the engine hands the switches over)" {
	n=$(find kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)
	[ "$n" -gt 10 ]
	run grep -rnE '(^|[^A-Za-z0-9_])(secure_)?getenv[[:space:]]*\(' kernels
	[ "$status" -eq 1 ] || { echo "kernels read the environment:" >&2; echo "$output" >&2; return 1; }
	# the objects too (a macro or a helper header cannot hide a call)
	build=$(dirname "$NTX_BIN")
	objs=$(find "$build/kernels" -name '*.o' 2>/dev/null)
	[ -n "$objs" ] || skip "no kernel objects in $build"
	for o in $objs; do
		if nm -u "$o" | grep -qwE '(secure_)?getenv'; then
			echo "$o calls getenv" >&2
			return 1
		fi
	done
}

@test "the NTX_* switches are read in lib/base/tunables.c only" {
	run grep -rnE 'getenv[[:space:]]*\([[:space:]]*"NTX_' lib kernels tools
	[ "$status" -eq 0 ]
	other=$(printf '%s\n' "$output" | grep -v '^lib/base/tunables\.c:' || true)
	[ -z "$other" ] || { echo "read elsewhere:" >&2; echo "$other" >&2; return 1; }
}

@test "every switch tunables.c reads has a row in doc/tunables.md" {
	names=$(grep -oE '"NTX_[A-Z0-9_]+"' lib/base/tunables.c | tr -d '"' | sort -u)
	[ "$(printf '%s\n' "$names" | wc -l)" -ge 15 ]
	for v in $names; do
		grep -qE "^\| \`$v\` \|" doc/tunables.md || {
			echo "$v: no row in doc/tunables.md" >&2
			return 1
		}
	done
}

@test "lib/ parts in order, kernels on lib/base only, no circle between files (scripts/check-layers)" {
	build=$(dirname "$NTX_BIN")
	ls "$build"/lib/*/*.o >/dev/null 2>&1 || skip "no library objects in $build"
	run scripts/check-layers "$build"
	echo "$output" >&2
	[ "$status" -eq 0 ]
	[[ "$output" == *"no circle between files"* ]]
}

@test "check-layers catches a part that uses a later one" {
	build=$(dirname "$NTX_BIN")
	ls "$build"/lib/*/*.o >/dev/null 2>&1 || skip "no library objects in $build"
	d=$BATS_TEST_TMPDIR/tree
	mkdir -p "$d"
	cp -r scripts lib kernels include "$d"/
	echo '#include "engine.h"' >> "$d/lib/base/err.c"
	run "$d/scripts/check-layers" "$build"
	[ "$status" -eq 1 ]
	[[ "$output" == *"lib/base/err.c: includes engine.h of engine, a later part than base"* ]]
}
