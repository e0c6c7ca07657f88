# Entry points a contributor and CI use. `make demo` builds the static binaries
# and runs the main job on a generated example; `make test` installs every
# tool the tests need (pinned, into .tools/) and runs all tests.
#
# Static linking: `+crt-static` is passed only with an explicit --target, so
# build scripts and proc-macros (host artifacts) stay dynamic, as they must.
HOST := $(shell rustc -vV | sed -n 's/^host: //p')
STATIC_DIR := target/$(HOST)/release
BINS := no-broken-symlinks auto-add-driver-runpath cuda-elf-inspect cuda-preflight

.PHONY: static demo test tools lint
static:
	RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target $(HOST)
	@for b in $(BINS); do file $(STATIC_DIR)/$$b | grep -Eq 'statically linked|static-pie linked' || { echo "$$b is not static"; exit 1; }; done
	@echo "static binaries in $(STATIC_DIR)"

demo: static
	bash docs/demo.sh $(STATIC_DIR)

tools:
	bash tests/tools/install.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets --locked -- -D warnings

test: tools static lint fuzz-build
	cargo test --release --locked --no-fail-fast
	bash nix/tests/run.sh $(STATIC_DIR)
	bash benches/compare.sh --quick

# The cargo-fuzz targets must keep building (CI runs this in `make test`).
# libfuzzer-sys builds on stable; running them uses cargo-fuzz on stable with
# RUSTC_BOOTSTRAP=1 and no sanitizer (see docs/robustness.md):
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none -O reader
.PHONY: fuzz-build
fuzz-build:
	cd fuzz && CARGO_TARGET_DIR=../target/fuzz cargo build --locked --release --bins
	cd fuzz && CARGO_TARGET_DIR=../target/fuzz cargo clippy --locked --release --bins -- -D warnings
