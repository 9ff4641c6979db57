# Everyday commands; the build itself is CMake (CMakeLists.txt). `make help` lists them.
# With CI=true in the environment, warnings are errors.

PREFIX ?= /usr/local
MAKEFLAGS += --no-print-directory
JOBS   ?= 2
CMAKE  ?= cmake
CTEST  ?= ctest
# Tests run one at a time by default: several write files in the build directory.
CTEST_FLAGS ?= --output-on-failure

CMAKE_FLAGS :=
ifeq ($(CI),true)
CMAKE_FLAGS += -DPPK_WERROR=ON
endif

BUILD      := build
ASAN_BUILD := build/asan
TSAN_BUILD := build/tsan

.PHONY: all build test asan tsan demo bench install python-install clean deps help

all: build

# Configuring again is cheap and picks up a changed PREFIX or CI.
build:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && $(CTEST) $(CTEST_FLAGS)

# Sanitizer builds use Debug so that assert() checks the internal invariants too.
asan:
	$(CMAKE) -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
		-DPPK_SANITIZE=address,undefined $(CMAKE_FLAGS)
	$(CMAKE) --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && $(CTEST) $(CTEST_FLAGS)

tsan:
	$(CMAKE) -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
		-DPPK_SANITIZE=thread $(CMAKE_FLAGS)
	$(CMAKE) --build $(TSAN_BUILD) -j$(JOBS)
	cd $(TSAN_BUILD) && $(CTEST) $(CTEST_FLAGS)

demo:
	bash tools/demo.sh

# W1 and W3 (by strings and by function id), micro, encode, latency and the Python
# binding's benchmarks, ~3 minutes; results in bench/results/.
# bench_soak is not run here (minutes): see docs/performance.md, "Benchmarks".
bench: build
	$(CMAKE) --build $(BUILD) -j$(JOBS) --target bench
	bash bench/run.sh $(BUILD)

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

# The Python package for one interpreter (PYTHON=...), into its site-packages.
PYTHON ?= python3
python-install:
	$(CMAKE) -S . -B $(BUILD)/python-install -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DBUILD_TESTING=OFF "-DPPK_PYTHONS=$$(command -v $(PYTHON))" $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD)/python-install -j$(JOBS) --target python
	$(CMAKE) --install $(BUILD)/python-install --component python

clean:
	rm -rf $(BUILD) demo-out

deps:
	bash tools/deps.sh

help:
	@echo "make [build]   configure (RelWithDebInfo) in $(BUILD)/ and build"
	@echo "make test      build and run ctest in $(BUILD)/"
	@echo "make asan      ASan+UBSan build in $(ASAN_BUILD)/ and its tests"
	@echo "make tsan      TSan build in $(TSAN_BUILD)/ and its tests"
	@echo "make demo      bash tools/demo.sh"
	@echo "make bench     build the benchmarks, run bench/run.sh (W1, W3, micro, encode, latency, Python)"
	@echo "make install   install under PREFIX=$(PREFIX)"
	@echo "make python-install PYTHON=python3   the Python package, into that interpreter"
	@echo "make deps      install the Debian packages (tools/deps.sh)"
	@echo "make clean     remove $(BUILD)/ and demo-out/"
