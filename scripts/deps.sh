#!/usr/bin/env bash
# Install everything xdns needs to build, test, demo and benchmark on a fresh Debian 12,
# then build the release binary. Idempotent: safe to run again; skips apt when nothing is missing.
# Run as root. Environment: XDNS_SKIP_BUILD=1 skips the cargo build.
set -euo pipefail

cd "$(dirname "$0")/.."

PACKAGES=(
  # build: Rust daemon + eBPF objects
  clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config make gcc bpftool linux-libc-dev
  # peers and clients for the lab, the differential tests and the benchmark
  knot knot-dnsutils nsd unbound knot-resolver pdns-recursor dnsperf iproute2 procps time ethtool nftables iptables
  # dnstap: a Frame Streams reader for the unix-socket test (kdig -G reads the files)
  fstrm-bin
  # system tests and charts
  python3 python3-pytest python3-dnspython python3-matplotlib
  # misc used by the scripts
  ca-certificates curl
  # packaging and its tests: dpkg-deb, useradd, man -l, systemd-analyze verify/security
  dpkg passwd man-db groff-base systemd
)

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: must run as root (apt, network namespaces, XDP)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps.sh: installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Keep packaged daemons from starting on install (they would grab port 53);
  # policy-rc.d is the Debian-standard way and is removed again afterwards.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  trap '[ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "deps.sh: all Debian packages present"
fi

# Packaged services must not hold port 53 (the lab uses its own namespaces, but users
# running the demo on the host would otherwise clash). Handle hosts with and without systemd.
# Resolvers compared by tests/system/test_resolver.py and the benchmark (the tests start their
# own instances in namespaces, with their own configs). Debian's knot-resolver 5.6 runs as
# instances kresd@N.service pulled in by kresd.target (plus kres-cache-gc), and ships
# /etc/init.d/kresd for hosts without systemd; pdns-recursor is pdns-recursor.service (systemd only).
for svc in knot nsd unbound kresd.target kresd@1 kres-cache-gc kresd pdns-recursor; do
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$svc" ]; then
    "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$svc" disable >/dev/null 2>&1 || true
  fi
done

# Rust toolchain. The project MSRV is 1.82 (Cargo.toml rust-version).
# Debian 12 ships rustc 1.63, which is too old; rustup is then the only way (needs internet).
need_minor=82
have_rust() {
  command -v cargo >/dev/null 2>&1 || return 1
  local v
  v=$(rustc --version 2>/dev/null | awk '{print $2}')
  [ -n "$v" ] || return 1
  local major minor
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
  [ "$major" -gt 1 ] || [ "$minor" -ge "$need_minor" ]
}
if [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! have_rust; then
  deb_rustc=$(apt-cache policy rustc 2>/dev/null | awk '/Candidate:/{print $2}')
  echo "deps.sh: no Rust >= 1.$need_minor found (Debian candidate rustc: ${deb_rustc:-none}, too old)."
  echo "deps.sh: installing rustup (https://sh.rustup.rs)"
  if ! curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal; then
    echo "deps.sh: could not install rustup (no access to sh.rustup.rs?). Install Rust >= 1.$need_minor" \
         "by other means (e.g. an offline rustup-init, or a newer distribution's rustc/cargo) and re-run." >&2
    exit 1
  fi
  export PATH="$HOME/.cargo/bin:$PATH"
  have_rust || { echo "deps.sh: Rust install failed" >&2; exit 1; }
fi
echo "deps.sh: $(rustc --version)"

if [ "${XDNS_SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release --locked
fi
