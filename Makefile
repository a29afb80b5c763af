# The two commands of the README: `make demo` and `make test`. Each sets itself up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAGE := scripts/stage.sh
export LOCAL_KERNELS := phanerozoic/spec-verify=$(CURDIR)/build

.PHONY: setup build demo demo-real bench-e2e bench-multi test test-fast native insn-budget pytest emulated-env cross-build emulated abi variants-build variants hub bench bench-kernels clean \
	llama-env llama bench-llama

setup: $(VENV)/.requirements-installed

$(VENV)/.requirements-installed: requirements.txt
	@$(STAGE) setup scripts/setup_venv.sh $(VENV) requirements.txt

build: setup
	@$(STAGE) build $(PY) scripts/build.py

# The kernel's checks first (under a minute), then the main job: a real model from PyPI
# (Gemma 3 270M, cached in ~/.cache/spec-verify/models) through llama.cpp built for this CPU
# (`make llama-env`: once, 5-14 minutes on 2 cores), plain against speculative decoding.
demo: build
	@$(STAGE) demo $(PY) examples/demo.py
	@$(MAKE) --no-print-directory demo-real

demo-real: build llama-env
	@PYTHONPATH=$$(PY=$(PY) scripts/llama_env.sh site) $(STAGE) demo-real $(PY) examples/demo_real.py

# End to end on real models (benchmarks/e2e.py): prompt lookup on Gemma 3 and SmolLM2, and
# the Qwen2.5-Coder pair; tables into benchmarks/results/, one file per CPU ({cpu}: "intel-xeon").
bench-e2e: build llama-env
	@PYTHONPATH=$$(PY=$(PY) scripts/llama_env.sh site) $(STAGE) bench-e2e $(PY) benchmarks/e2e.py --fixed 8 \
	  --markdown benchmarks/results/e2e-lookup-{cpu}.md
	@PYTHONPATH=$$(PY=$(PY) scripts/llama_env.sh site) $(STAGE) bench-pair $(PY) benchmarks/e2e.py --pair \
	  --max-new 128 --repeats 1 --threads 1,2 --markdown benchmarks/results/e2e-pair-{cpu}.md

# Multi-request workloads (benchmarks/e2e_multi.py): plain, the prompt-lookup default, the
# suffix decoder and each engine's own lookup through llama.cpp and transformers, with the
# oracle replay's ceilings; one file per CPU. About an hour on 2 idle cores.
bench-multi: build llama-env
	@PYTHONPATH=$$(PY=$(PY) scripts/llama_env.sh site) $(STAGE) bench-multi $(PY) benchmarks/e2e_multi.py \
	  --markdown benchmarks/results/e2e-multi-{cpu}.md

# Two pytest worker processes (pytest-xdist), one a core: most tests spend their time in
# Python, one core each. Work stealing, since single tests take from milliseconds to a minute.
# PYTEST_WORKERS=0 runs in this process alone.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),-p no:xdist,-n $(PYTEST_WORKERS) --dist worksteal)

pytest: build
	@$(STAGE) pytest $(PY) -m pytest -q $(PYTEST_PARALLEL) tests --ignore=tests/llama

# The development tier: every test but those marked slow (tests/conftest.py), in seconds.
# `make test`, `make pytest` and CI still run everything (tests/llama: `make llama`).
test-fast: build
	@$(STAGE) test-fast $(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not slow" tests --ignore=tests/llama

# The core's own tests: every path bit for bit, natively and under emulation of the other
# architecture (aarch64 on an x86-64 host, x86-64 on an aarch64 one: scripts/arch.sh).
native:
	@$(STAGE) native scripts/native_tests.sh

# Exact aarch64 instruction counts per element against the budgets (scripts/insn_budget.py).
insn-budget: setup
	@$(STAGE) insn-budget $(PY) scripts/insn_budget.py

# The other architecture's variant: cross-built against its torch wheel, loaded through
# `kernels` in an emulated Python of that architecture and tested there, down to identical
# results with this machine's (scripts/emulated_tests.sh).
emulated-env:
	@PY=$(PY) $(STAGE) emulated-env scripts/emulated_tests.sh env

cross-build: setup emulated-env
	@PY=$(PY) $(STAGE) cross-build scripts/emulated_tests.sh build

emulated: build cross-build
	@PY=$(PY) $(STAGE) emulated scripts/emulated_tests.sh test

# Every variant in build/ (both arches) against manylinux_2_28 and the Python 3.9 ABI, with
# kernel-builder's checker; also its exports, metadata.json and _ops.py (scripts/abi_check.py).
abi: build cross-build
	@$(STAGE) abi $(PY) scripts/abi_check.py

test: native insn-budget pytest emulated abi

# The release variants besides `make build`'s: torch212 (x86-64, aarch64) and the stable-ABI one
# for aarch64, each built against its PyPI wheel; the x86-64 ones tested under torch 2.12.1,
# 2.13.0 (this venv's), 2.14.1 and 2.15.0, each with kernels 0.17.2 and 0.19.1, in venvs of
# their own (scripts/variants.sh). Cold: about 14 GB of downloads (cached under
# ~/.cache/spec-verify/variants); not in `make test`.
variants-build: setup emulated-env
	@PY=$(PY) $(STAGE) variants-build scripts/variants.sh build

variants: build variants-build
	@PY=$(PY) $(STAGE) variants scripts/variants.sh test

# What would be uploaded to phanerozoic/spec-verify, assembled in hub/ and checked; prints the
# upload command (scripts/hub.py). Nothing is uploaded.
hub: build cross-build variants-build
	@$(STAGE) hub $(PY) scripts/hub.py --python $(PY) \
	  $$(PY=$(PY) scripts/variants.sh pythons | sed 's/^/--python /')

# llama.cpp: spec_verify.llama_cpp against a real llama.cpp on tiny GGUF models written by
# the tests. llama-cpp-python is built from source once (5-14 minutes on 2 cores) into
# ~/.cache/spec-verify/llama (scripts/llama_env.sh) and put on PYTHONPATH; a missing
# llama_cpp fails these tests rather than skipping them. CI runs this after `make test`.
llama-env: setup
	@PY=$(PY) $(STAGE) llama-env scripts/llama_env.sh setup

llama: build llama-env
	@PYTHONPATH=$$(PY=$(PY) scripts/llama_env.sh site) SPEC_VERIFY_REQUIRE_LLAMA=1 \
		$(STAGE) llama $(PY) -m pytest -q tests/llama

# spec-verify's loop against llama-cpp-python's own speculative decoding, on the tests' pair.
bench-llama: build llama-env
	@PYTHONPATH=$$(PY=$(PY) scripts/llama_env.sh site) $(STAGE) bench-llama $(PY) benchmarks/llama_cpp_speculative.py

bench: build
	@$(STAGE) bench $(PY) benchmarks/compare.py
	@$(STAGE) bench-batch $(PY) benchmarks/batch.py

# `kernels benchmark ./` (kernels' own runner over benchmarks/benchmark.py; kernels[benchmark]
# 0.19.1 from requirements.txt), its JSON and table into benchmarks/results/ (scripts/kernels_bench.py).
bench-kernels: build
	@$(STAGE) bench-kernels $(PY) scripts/kernels_bench.py

clean:
	rm -rf build hub
