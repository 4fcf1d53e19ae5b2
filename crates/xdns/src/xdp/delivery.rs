//! Answers that leave: the mode each interface is attached in, and the delivery guard.
//!
//! `XDP_TX` in native mode hands the frame to the driver, which may drop it and count nothing
//! the program can see: a veth delivers it only to a peer running an XDP program of its own
//! (`xdns_bpf::iface`). [`plan`] picks the attach mode so that `auto` never loses answers it
//! can foresee; [`native_warning`] is what an explicit `native` is told where it will; the
//! guard ([`super::runtime::XdpRuntime::guard`], every [`GUARD_PERIOD`]) watches each
//! interface's `XDP_TX` error counters and a veth's peer, and moves an `auto` interface that
//! loses answers to generic mode. README, "XDP modes, veth and containers".

use super::XdpMode;

/// Why each interface runs the program the way it does, and how often the guard moved it to
/// generic mode: shared with the status reader of other threads.
pub type DeliveryReport = std::sync::Arc<std::sync::Mutex<Vec<Delivery>>>;

/// One interface in the [`DeliveryReport`].
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    pub interface: String,
    /// Why it runs in a mode other than the configured one ("veth peer c0 has no XDP
    /// program: generic"); `None`: as configured, or as the kernel chose for `auto`.
    pub reason: Option<String>,
    /// Times the guard detached a native attachment that lost answers and attached generic.
    pub fallbacks: u64,
}

/// The delivery guard's view of one interface.
pub(super) struct Guard {
    pub(super) interface: String,
    /// The driver's `XDP_TX` error counters; `None` when it shows none (said once at attach).
    pub(super) tx: Option<xdns_bpf::iface::TxErrors>,
    /// Their sum at the last look.
    pub(super) last_errors: u64,
    /// Losses in explicit native mode were logged (once).
    pub(super) warned: bool,
    /// A veth: its peer is checked too.
    pub(super) veth: bool,
}

/// The guard's rule: `lost` `XDP_TX` errors against `sent` kernel answers in one look mean
/// that native mode loses the answers when at least half of them are lost. With one
/// interface the comparison is exact; with several, answers sent on the others dilute it, so
/// only a loss of at least half of all kernel answers counts (a driver's occasional full ring
/// under load is no reason to leave native mode).
pub fn losing(lost: u64, sent: u64) -> bool {
    lost > 0 && sent > 0 && lost.saturating_mul(2) >= sent
}

/// How often the delivery guard ([`XdpRuntime::guard`]) looks at the drivers' counters.
pub const GUARD_PERIOD: std::time::Duration = std::time::Duration::from_millis(500);

impl Guard {
    /// Start watching `ifname`'s `XDP_TX` error counters; a driver that shows none is said
    /// once in the log (its losses cannot be seen).
    pub(super) fn start(ifname: &str, veth: bool) -> Self {
        let tx = match xdns_bpf::iface::TxErrors::probe(ifname) {
            Ok(mut tx) if !tx.counters.is_empty() => {
                if !tx.known_driver() {
                    tracing::info!(interface = %ifname, driver = %tx.driver, counters = ?tx.counters,
                        "XDP: driver not in xdns's table of XDP_TX error counters; counting these by their names");
                }
                let last = tx.read().ok().flatten().unwrap_or(0);
                return Self { interface: ifname.to_string(), tx: Some(tx), last_errors: last, warned: false, veth };
            }
            Ok(tx) => {
                tracing::info!(interface = %ifname, driver = %tx.driver,
                    "XDP: the driver shows no XDP_TX error counters: answers it fails to send cannot be seen");
                None
            }
            Err(e) => {
                tracing::info!(interface = %ifname, "XDP: cannot read the driver's statistics ({e}): answers it fails to send cannot be seen");
                None
            }
        };
        Self { interface: ifname.to_string(), tx, last_errors: 0, warned: false, veth }
    }
}

/// The attach mode for `ifname` under the configured `mode`, and why it differs from what
/// the kernel would pick (for the log and `xdns stats`). `auto` never picks a mode that loses
/// answers it can foresee: on a veth whose peer runs no native XDP program, or whose peer
/// it cannot see, it picks generic. Elsewhere `auto` lets the kernel choose (native where
/// the driver has it), and the guard watches the driver's counters.
pub fn plan(
    mode: XdpMode,
    ifname: &str,
    peer: &std::io::Result<xdns_bpf::iface::PeerXdp>,
) -> (xdns_bpf::runtime::AttachMode, Option<String>) {
    use xdns_bpf::runtime::AttachMode;
    match mode {
        XdpMode::Native => (AttachMode::Native, None),
        XdpMode::Generic => (AttachMode::Generic, None),
        XdpMode::Auto => match peer {
            Ok(p) => match p.why_not_native() {
                Some(why) => (AttachMode::Generic, Some(format!("{why}: generic"))),
                None => (AttachMode::Auto, None),
            },
            Err(e) => {
                tracing::debug!(interface = %ifname, "XDP: cannot ask the kernel what {ifname} is ({e}); the kernel chooses the mode");
                (AttachMode::Auto, None)
            }
        },
    }
}

/// The warning for `mode = "native"` on an interface that will lose the answers (`xdns check`
/// prints it too); `None` where native mode delivers them, or where that cannot be known.
pub fn native_warning(ifname: &str, peer: &std::io::Result<xdns_bpf::iface::PeerXdp>) -> Option<String> {
    let peer = peer.as_ref().ok()?;
    let why = peer.why_not_native()?;
    let will = match peer {
        xdns_bpf::iface::PeerXdp::Unknown { .. } => "may lose",
        _ => "will lose",
    };
    Some(format!(
        "XDP: {ifname}: mode = \"native\" {will} the kernel's answers: {why} (a veth delivers native \
         XDP_TX frames only to a peer running an XDP program of its own). Fix either: attach an XDP \
         program to the peer (one that passes what it does not handle), or set mode = \"generic\" \
         (\"auto\" chooses generic here)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdns_bpf::iface::PeerXdp;
    use xdns_bpf::runtime::AttachMode;

    #[test]
    fn losing_means_half_the_answers_or_more() {
        assert!(losing(1, 1));
        assert!(losing(5, 10));
        assert!(!losing(4, 10), "a few errors under load are no reason to leave native mode");
        assert!(!losing(0, 10));
        assert!(!losing(3, 0), "errors with no answers sent are not ours");
    }

    #[test]
    fn auto_picks_generic_where_native_loses_answers() {
        let bare = Ok(PeerXdp::NoProgram { peer: "c0".into(), elsewhere: true });
        let (mode, why) = plan(XdpMode::Auto, "s0", &bare);
        assert_eq!(mode, AttachMode::Generic);
        assert_eq!(why.as_deref(), Some("veth peer c0 (another network namespace) has no XDP program: generic"));
        let unseen = Ok(PeerXdp::Unknown { reason: "EPERM".into() });
        assert_eq!(plan(XdpMode::Auto, "s0", &unseen).0, AttachMode::Generic);
        for ok in [Ok(PeerXdp::NotVeth), Ok(PeerXdp::Ready { peer: "c0".into() })] {
            assert_eq!(plan(XdpMode::Auto, "s0", &ok), (AttachMode::Auto, None));
        }
        // explicit modes are kept, with a warning for native where it loses answers
        assert_eq!(plan(XdpMode::Native, "s0", &bare), (AttachMode::Native, None));
        assert_eq!(plan(XdpMode::Generic, "s0", &bare), (AttachMode::Generic, None));
        let w = native_warning("s0", &bare).unwrap();
        for part in ["s0", "will lose", "veth peer c0", "attach an XDP", "mode = \"generic\""] {
            assert!(w.contains(part), "{part}: {w}");
        }
        assert!(native_warning("s0", &unseen).unwrap().contains("may lose"));
        assert_eq!(native_warning("s0", &Ok(PeerXdp::NotVeth)), None);
    }
}
