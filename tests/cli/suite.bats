#!/usr/bin/env bats
# The suite as a whole: one version line format for every tool, and what
# `make install` puts in place (tools, man pages, the specs they cite).

bats_require_minimum_version 1.5.0

load install_helpers

setup() {
	cd "$BATS_TEST_DIRNAME/../.."
	T="$BATS_TEST_TMPDIR"
}

@test "every tool's -V: 'PROG (ntx) VERSION', the same version" {
	v=
	for t in ntx-inspect ntx-plan ntx-pack ntx-skip-calib ntx-run ntx-gguf-gen; do
		run "$NTX_BIN/$t" -V
		[ "$status" -eq 0 ]
		[[ "$output" =~ ^$t\ \(ntx\)\ ([0-9]+\.[0-9]+\.[0-9]+)$ ]] || {
			echo "$t: '$output'" >&2
			return 1
		}
		[ -z "$v" ] || [ "$v" = "${BASH_REMATCH[1]}" ]
		v=${BASH_REMATCH[1]}
	done
}

@test "make install: tools, man pages, and the doc/*.md specs the man pages cite" {
	build=$(dirname "$NTX_BIN")
	run install_private DESTDIR="$T/root" PREFIX=/usr
	[ "$status" -eq 0 ]
	for t in ntx-inspect ntx-plan ntx-pack ntx-skip-calib ntx-run; do
		[ -x "$T/root/usr/bin/$t" ]
		[ -f "$T/root/usr/share/man/man1/$t.1" ]
	done
	for m in doc/*.1; do # every spec a man page cites is installed
		for s in $(grep -o 'doc/[a-z-]*\.md' "$m" | sort -u); do
			[ -f "$T/root/usr/share/doc/ntx/$s" ] || {
				echo "$m cites $s, not installed" >&2
				return 1
			}
		done
	done
	[ -f "$T/root/usr/share/doc/ntx/README.md" ]
}
