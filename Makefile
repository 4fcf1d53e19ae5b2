SHELL := /bin/bash
# xdns top-level targets. Everything needs root (apt, network namespaces, XDP).
#   make demo        install deps, build, run the demo in a throw-away netns lab
#   make test        install deps, build, cargo tests + system tests (skips count as failures)
#   make bench       full benchmark: xdns vs Knot DNS vs NSD, chart in bench/out/bench.png,
#                    then bench-resolver
#   make bench-smoke a few seconds per peer, no performance assertions (CI); also bench-resolver-smoke
#   make profile     perf profile of the XDP program under load, by bpf/ source line
#                    (profile-resolver: the same for cache hits)
#   make bench-resolver        resolver benchmark: xdns vs Unbound, Knot Resolver, PowerDNS
#                              Recursor on the lab tree, chart in bench/out/resolver.png
#   make bench-resolver-smoke  the same in about two minutes, checks the harness only
#   make bench-resolver-delay  only its cold-delay part (misses over the remote lab tree with a
#                              delaying relay: latency, misses/s, CPU per miss) and the relay's
#                              own ceiling; chart in bench/out/resolver-delay.png
#   make bench-guard flood guard: drop rate vs blocked sources (1 .. 1M) for xdns, nftables, iptables,
#                    an empty XDP program; legitimate answers and time to mitigate; bench/out/guard.png
#                    first the gate's cost on allowed answers (test run; alone: bench/guard.py --gate-only)
#   make bench-inpath  in-path cache on a router: xdns hits vs dnsdist's packet cache vs the
#                      plain router, miss forwarding with and without xdns, bench/out/inpath.png
#   make bench-latency round-trip p50/p90/p99/p99.9 at a few loads: xdns (XDP native, generic,
#                    userspace) vs Knot DNS (XDP, UDP) vs NSD, xdns's server time, no-op baselines,
#                    telemetry cost; bench/out/latency.png
#   make bench-scale large zones: load time, memory, replies/s at 100k and 1M records vs Knot, NSD;
#                    VARIANT=nsec3-optout (or nsec) the same zone signed by Knot DNS
#   make deps        only install packages and build
#   make package     the Debian package (binary, systemd unit, default config, man pages)
# The system Python is used on purpose: its apt modules (dnspython, pytest, matplotlib)
# are what deps.sh installs; a pyenv/venv python3 earlier in PATH lacks them.

PYTHON  ?= /usr/bin/python3
CARGO   ?= cargo
PYTEST   = $(PYTHON) -m pytest -p no:cacheprovider -o xfail_strict=true -rfEs
SYSTEST ?= tests/system

.PHONY: all deps build demo test test-unit test-system bench bench-smoke bench-resolver bench-scale bench-axfr package \
	bench-resolver-smoke bench-resolver-delay bench-guard bench-inpath bench-latency profile profile-resolver clean-lab

all: build

deps:
	./scripts/deps.sh

build:
	$(CARGO) build --release --locked

# The Debian package: target/package/xdns_VERSION_ARCH.deb (scripts/package.sh).
package: deps
	./scripts/package.sh

demo: deps
	./scripts/demo.sh

test: deps test-unit test-system

test-unit:
	mkdir -p target; $(CARGO) test --workspace --locked 2>&1 | tee target/cargo-test.log; rc=$${PIPESTATUS[0]}; \
	  if grep -Eq '^test result:.* [1-9][0-9]* ignored' target/cargo-test.log; then \
	    grep -E '^test .* \.\.\. ignored' target/cargo-test.log >&2; \
	    echo "make test: ignored cargo tests are failures (team rule: no skipped tests)" >&2; exit 1; fi; exit $$rc

# pytest's own exit status covers failures; tests/conftest.py turns skips into failures and
# the summary check below catches anything that still reports "skipped" or "xfail".
test-system:
	mkdir -p target; $(PYTEST) $(SYSTEST) 2>&1 | tee target/pytest.log; rc=$${PIPESTATUS[0]}; \
	  if tail -n 1 target/pytest.log | grep -Eq 'skipped|xfail|xpassed|no tests ran'; then \
	    echo "make test: skipped/xfail tests are failures" >&2; exit 1; fi; exit $$rc

bench: deps bench-resolver
	$(PYTHON) bench/bench.py

bench-smoke: build bench-resolver-smoke
	$(PYTHON) bench/bench.py --smoke
	$(PYTHON) bench/scale.py --smoke
	$(PYTHON) bench/scale.py --smoke --variant nsec3-optout
	$(PYTHON) bench/guard.py --smoke
	$(PYTHON) bench/inpath.py --smoke --no-kernel
	$(PYTHON) bench/latency.py --smoke

# The flood guard against nftables and iptables (issue 25): table, bench/out/guard.png.
bench-guard: deps
	$(PYTHON) bench/guard.py

# Large zones: a TLD-like zone at 100k and 1M records, xdns vs Knot DNS vs NSD (load time,
# memory, replies/s), chart in bench/out/scale.png. SIZES=100000,1000000,10000000 for more.
# VARIANT=nsec3-optout (NSEC3 with opt-out, as a TLD) or nsec: the zone signed by Knot DNS
# (bench/genzone.py --sign, once per size into bench/out/), chart in bench/out/scale-VARIANT.png.
SIZES ?= 100000,1000000
VARIANT ?= unsigned
bench-scale: deps
	$(PYTHON) bench/scale.py --sizes $(SIZES) --variant $(VARIANT)

# Latency (issue 27): round-trip percentiles at a few offered loads, bench/out/latency.png.
bench-latency: deps
	$(PYTHON) bench/latency.py

bench-inpath: deps
	$(PYTHON) bench/inpath.py

# AXFR of a 1M-record zone as a secondary (issue 28): xdns against Knot DNS, same primary.
bench-axfr: build
	$(PYTHON) bench/axfr.py

bench-resolver: deps
	$(PYTHON) bench/resolver.py

# Where the XDP program's time goes under kxdpgun load: perf samples by bpf/ source line.
profile: build
	command -v perf >/dev/null || apt-get install -y --no-install-recommends linux-perf
	$(PYTHON) bench/profile.py

profile-resolver: build
	command -v perf >/dev/null || apt-get install -y --no-install-recommends linux-perf
	$(PYTHON) bench/profile.py --resolver

bench-resolver-smoke: build
	$(PYTHON) bench/resolver.py --smoke

# Issue 32's rows: the remote tree (tests/lab/tree.py) with 5 ms one-way per server.
bench-resolver-delay: build
	$(PYTHON) bench/resolver.py --parts cold-delay,relay-ceiling

# Remove namespaces left behind by a killed run (only lab-made ones: prefix xdl-).
clean-lab:
	for ns in $$(ip netns list | awk '/^xdl-/{print $$1}'); do ip netns del $$ns; done
