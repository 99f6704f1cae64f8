# ntx - build everything with plain make.
#   make [all]      library, tools, test programs (CUDA when nvcc is found)
#   make test       unit + CLI tests; ends with "N passed, N failed"
#   make test-gpu   CUDA parity and end-to-end tests (needs a GPU)
#   make bench      benchmarks, JSON on stdout
#   make demo       the README's main job: inspect -> plan -> pack -> run
#   make asan       everything under AddressSanitizer + UBSan (in build-asan/)
#   make install    PREFIX=/usr/local (tools, man pages, the specs in share/doc/ntx,
#                   include/ntx.h, libntx.a, libntx.so*, lib/pkgconfig/ntx.pc)
#   make clean

PREFIX  ?= /usr/local
V       ?= 0
Q       := $(if $(filter 1,$(V)),,@)
BUILD   ?= build
CC      ?= cc
OPT     ?= -O2 -g
SAN     ?=
# Messages are truncated on purpose at NTX_ERR_MAX, hence -Wno-format-truncation.
# -fPIC: the library's objects also make libntx.so.
# The library's parts (lib/README.md), lowest first. Kernels see only
# lib/base (KINC); everything else sees every part (INC) and
# scripts/check-layers holds them to their order.
LIB_PARTS := base format text plan stream engine api
KINC    := -Iinclude -Ilib/base -Ikernels -Ikernels/cpu -Ikernels/cuda
INC     := -Iinclude $(foreach p,$(LIB_PARTS),-Ilib/$(p)) -Ikernels -Ikernels/cpu -Ikernels/cuda
CFLAGS_ALL = -std=c11 -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -pthread -fPIC \
	$(INC) $(OPT) $(SAN) $(CFLAGS)
LDLIBS_ALL = -ljansson -lzstd -lm -pthread -ldl -lrt
# libraries of one tool only
LDLIBS_ntx-serve = -lmicrohttpd

# CUDA: on PATH, else the default toolkit location; NO_CUDA=1 skips it.
ifeq ($(NO_CUDA),)
NVCC ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
endif
ifneq ($(strip $(NVCC)),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# CUDA_ARCHS: the local GPUs' architectures when nvidia-smi answers (one
# architecture builds four times faster), else all four. Packages and the
# device machine build all four: make CUDA_ARCHS="80 86 89 90".
ifeq ($(origin CUDA_ARCHS),undefined)
CUDA_ARCHS := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
	tr -d '. ' | grep -E '^[0-9]+$$' | sort -u | tr '\n' ' ')
ifeq ($(strip $(CUDA_ARCHS)),)
CUDA_ARCHS := 80 86 89 90
endif
endif
NVCCFLAGS  ?= -O3 -std=c++17 -Xcompiler -fPIC -lineinfo \
	$(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
CFLAGS_ALL += -DNTX_HAVE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++
CUDA_SRC   := $(wildcard kernels/cuda/*.cu)
CUDA_OBJ   := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
endif

LIB_SRC  := $(foreach p,$(LIB_PARTS),$(wildcard lib/$(p)/*.c)) $(wildcard kernels/cpu/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libntx.a
# The shared library: the same objects, only the ntx.h calls exported
# (lib/api/libntx.map), soname libntx.so.MAJOR; the version is version.h's.
SO_VERSION := $(shell sed -n 's/^\#define NTX_VERSION "\(.*\)"/\1/p' lib/base/version.h)
SO_MAJOR := $(firstword $(subst ., ,$(SO_VERSION)))
SO       := $(BUILD)/libntx.so.$(SO_VERSION)
PC       := $(BUILD)/ntx.pc
EXAMPLE  := $(if $(wildcard examples/example.c),$(BUILD)/bin/ntx-example)
TOOLS    := ntx-inspect ntx-plan ntx-pack ntx-run ntx-skip-calib ntx-serve
TOOL_BIN := $(foreach t,$(TOOLS),$(if $(wildcard tools/$(t)/*.c),$(BUILD)/bin/$(t)))
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
GEN_SRC  := $(wildcard tests/gen/*.c)
GEN_BIN  := $(if $(GEN_SRC),$(BUILD)/bin/ntx-gguf-gen)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
BENCH_SRC := $(wildcard tests/bench/*.c)
BENCH_BIN := $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)
# With CUDA: tests/gpu/*.c are the GPU parity tests ($(BUILD)/tests-gpu/, run by
# `make test-gpu`); tests/gpu/host_blockmath.cu checks the kernels' block math on the
# host, needs no GPU and runs with `make test`.
GPU_TEST_BIN := $(if $(CUDA_SRC),$(patsubst tests/gpu/%.c,$(BUILD)/tests-gpu/%,$(wildcard tests/gpu/*.c)))
CUDA_HOST_TEST := $(if $(CUDA_SRC),$(if $(wildcard tests/gpu/host_blockmath.cu),$(BUILD)/tests/test_cuda_host))

# SIMD variants are compiled with their own flags and chosen at run time.
# kernels depend on lib/base at most
$(BUILD)/kernels/%.o: INC = $(KINC)
$(BUILD)/kernels/cpu/%_avx2.o: XFLAGS = -mavx2 -mfma -mf16c
$(BUILD)/kernels/cpu/%_avx512.o: XFLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
$(BUILD)/kernels/cpu/%_amx.o: XFLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c \
	-mamx-tile -mamx-int8

.PHONY: all test test-gpu bench demo asan install clean fuzz FORCE
all: $(LIB) $(SO) $(PC) $(EXAMPLE) $(TOOL_BIN) $(TEST_BIN) $(GEN_BIN) $(BENCH_BIN) $(GPU_TEST_BIN) $(CUDA_HOST_TEST)

# C objects are rebuilt when the compiler flags change (-fPIC came late).
$(BUILD)/.cflags: FORCE
	@mkdir -p $(dir $@)
	@echo '$(CC) $(CFLAGS_ALL)' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

$(BUILD)/%.o: %.c $(BUILD)/.cflags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_ALL) $(XFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) $(KINC) -DNTX_HAVE_CUDA=1 -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ) $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(SO): $(LIB_OBJ) $(CUDA_OBJ) lib/api/libntx.map
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -shared -Wl,-soname,libntx.so.$(SO_MAJOR) \
		-Wl,--version-script=lib/api/libntx.map -Wl,--no-undefined -o $@ \
		$(LIB_OBJ) $(CUDA_OBJ) $(LDLIBS_ALL)
	$(Q)ln -sf libntx.so.$(SO_VERSION) $(BUILD)/libntx.so.$(SO_MAJOR)
	$(Q)ln -sf libntx.so.$(SO_MAJOR) $(BUILD)/libntx.so

# ntx.pc for PREFIX, rewritten only when PREFIX or the version changes.
$(PC): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
		'Name: ntx' 'Description: run Llama GGUF models on the CPU or a CUDA GPU' \
		'Version: $(SO_VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lntx' \
		'Libs.private: $(LDLIBS_ALL)' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
FORCE:

# The example uses only include/ntx.h and libntx.so (found beside bin/).
$(BUILD)/bin/ntx-example: examples/example.c include/ntx.h $(SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) -std=c11 -Wall -Wextra -Werror -pedantic $(OPT) $(SAN) $(CFLAGS) -Iinclude -o $@ $< \
		-L$(BUILD) -lntx -Wl,-rpath,'$$ORIGIN/..'

# Every tool links tools/common (tool.h: usage errors, shared options, exit
# statuses). The tools in API_TOOLS are compiled with include/ and
# tools/common/ only on the include path: they can use nothing but ntx.h
# (they still link libntx.a statically). Every tool is one now; a tool left
# out of it would see the library's parts.
TOOL_COMMON_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/*.c))
API_TOOLS := ntx-inspect ntx-skip-calib ntx-plan ntx-pack ntx-serve ntx-run
$(BUILD)/tools/common/%.o: INC = -Iinclude -Itools/common
$(foreach t,$(API_TOOLS),$(eval $(BUILD)/tools/$(t)/%.o: INC = -Iinclude -Itools/common))
$(foreach t,$(filter-out $(API_TOOLS),$(TOOLS)),$(eval $(BUILD)/tools/$(t)/%.o: INC += -Itools/common))

define tool_rule
$(BUILD)/bin/$(1): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/$(1)/*.c)) $(TOOL_COMMON_OBJ) $(LIB)
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  LINK    $$@")
	$(Q)$$(CC) $$(CFLAGS_ALL) -o $$@ $$(filter %.o,$$^) $(LIB) $$(LDLIBS_$(1)) $$(LDLIBS_ALL)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

$(BUILD)/bin/ntx-gguf-gen: $(GEN_SRC:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB) $(LDLIBS_ALL)

$(BUILD)/bench/%: $(BUILD)/tests/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB) $(LDLIBS_ALL)

$(BUILD)/tests/gpu/%.o: XFLAGS = -Itests/unit
$(BUILD)/tests-gpu/%: $(BUILD)/tests/gpu/%.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB) $(LDLIBS_ALL)

$(BUILD)/tests/gpu/host_blockmath.o: NVCCFLAGS += -Ikernels/cpu -Itests/unit
$(BUILD)/tests/test_cuda_host: $(BUILD)/tests/gpu/host_blockmath.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB) $(LDLIBS_ALL)

test: all
	@BUILD=$(BUILD) tests/run-tests.sh

test-gpu: all
	@BUILD=$(BUILD) tests/run-gpu-tests.sh

bench: all
	@BUILD=$(BUILD) scripts/bench

demo: all
	@BUILD=$(BUILD) scripts/demo

asan:
	$(MAKE) BUILD=build-asan NO_CUDA=1 OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 tests/run-tests.sh

fuzz:
	@BUILD=$(BUILD) scripts/fuzz

# The man pages cite the format specs (doc/*.md): they go to
# PREFIX/share/doc/ntx/doc/, beside the README.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/doc/ntx/doc
	install -m 755 $(TOOL_BIN) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 doc/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/ntx/
	install -m 644 doc/*.md $(DESTDIR)$(PREFIX)/share/doc/ntx/doc/
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/ntx.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libntx.so.$(SO_VERSION) $(DESTDIR)$(PREFIX)/lib/libntx.so.$(SO_MAJOR)
	ln -sf libntx.so.$(SO_MAJOR) $(DESTDIR)$(PREFIX)/lib/libntx.so
	install -m 644 $(PC) $(DESTDIR)$(PREFIX)/lib/pkgconfig/

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
