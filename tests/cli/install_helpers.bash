# install_helpers.bash - `make install` for the tests without touching the
# build under test: the build directory is copied (timestamps kept) and the
# copy is installed with the configuration the build was made with (CUDA or
# not, read from its compiler-flags stamp), so make finds it up to date and
# rebuilds nothing. Installing from the build itself with other variables
# (NO_CUDA=1, say) would rebuild it, and leave the user with other binaries
# than the ones they built (issue 28).

# install_private ARGS...: make -s install ARGS... from a copy of $build in
# $T/build-copy; the status is make's.
install_private() {
	local cfg=()
	grep -q -- '-DNTX_HAVE_CUDA=1' "$build/.cflags" || cfg=(NO_CUDA=1)
	rm -rf "$T/build-copy"
	cp -a "$build" "$T/build-copy" || return 1
	make -s install "${cfg[@]}" BUILD="$T/build-copy" "$@"
}
