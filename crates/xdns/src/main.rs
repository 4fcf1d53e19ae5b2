//! `xdns`: an authoritative DNS server and caching recursive resolver whose fast path is an
//! XDP program (zone answers and resolver cache hits answered in the kernel).
//!
//! ```text
//! xdns serve --config FILE [--listen ADDR]... [--control PATH] [--metrics ADDR]
//!            [--udp-workers N] [--log-level FILTER] [--takeover]
//! xdns check --config FILE
//! xdns stats [--config FILE | --control PATH] [--json]
//! xdns flush [--config FILE | --control PATH] [NAME [--subtree]]
//! xdns guard [--config FILE | --control PATH] list | block PREFIX [--for DURATION] | unblock PREFIX
//! ```
//!
//! Exit status: 0 on success (and after a clean SIGTERM/SIGINT), 1 on any error.

mod config;
mod config_doc;
mod control;
mod detect;
mod dnstap;
mod guard;
mod heap;
mod inpath;
mod kit;
mod kit_hops;
mod metrics;
mod privilege;
mod query;
mod recursion;
mod reload;
mod server;
mod stats;
mod probe;
mod progress;
mod takeover;
mod telemetry;
mod xdp;
mod xfr;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use config::{Config, Overrides};

/// glibc's allocator with large blocks on transparent huge pages (heap.rs).
#[global_allocator]
static ALLOCATOR: heap::HugePages = heap::HugePages;

/// `xdns --version`: the version, the git revision built from and the BPF program's build
/// id (`xdns_bpf::build_id`).
fn version_line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| {
        format!("{} (git {}, bpf {})", env!("CARGO_PKG_VERSION"), env!("XDNS_GIT_REV"), xdns_bpf::build_id())
    })
}

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "xdns",
    version = version_line(),
    about = "Authoritative DNS server and caching resolver with an XDP fast path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve in the foreground. SIGHUP reloads, SIGTERM/SIGINT stop; `--takeover` replaces a
    /// running server without losing a query.
    Serve(ServeArgs),
    /// Validate the configuration and load every zone without serving.
    Check {
        /// Configuration file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Print a running server's counters.
    Stats(StatsArgs),
    /// Empty a running server's resolver caches (answers, delegations, negative answers,
    /// failures, server RTTs; the root hints stay), or only what is cached for one name.
    Flush(FlushArgs),
    /// Live blocks of a running server, no reload: list them, block a source (address or
    /// prefix, optionally for a while), unblock one.
    Guard(GuardArgs),
    /// Latency telemetry rules of a running server, no reload: list them, add one
    /// (`src=PREFIX dst=PREFIX qname=SUFFIX qtype=TYPE path=P,.. sample=N`, or `all`), delete
    /// one by its number (or `all`).
    Telemetry(TelemetryArgs),
    /// In-band latency probes: queries carrying EDNS option 65050; a server that times them
    /// writes its receive and transmit ns back, so each round trip splits into server and
    /// network time. `--reflect ADDR` runs the no-op reflector for `--baseline`.
    Probe(ProbeArgs),
    /// Secondary zones: check the primary now (`refresh`: IXFR when it has a newer serial) or
    /// transfer the whole zone again (`retransfer`: AXFR).
    Zone(ZoneArgs),
    /// Write the manual pages (xdns.8, xdns.toml.5) and shell completions into a directory
    /// (used by packaging; generated from the command line and configuration definitions).
    #[command(hide = true)]
    Manual {
        /// Directory to write into (created).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Arguments of `xdns zone`.
#[derive(Debug, Args)]
struct ZoneArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// `refresh` or `retransfer`.
    #[arg(value_parser = ["refresh", "retransfer"])]
    action: String,
    /// The zone's name.
    name: String,
}

/// Arguments of `xdns telemetry`.
#[derive(Debug, Args)]
struct TelemetryArgs {
    #[command(flatten)]
    control: ControlArgs,
    #[command(subcommand)]
    action: TelemetryAction,
}

#[derive(Debug, Subcommand)]
enum TelemetryAction {
    /// The rules, numbered from 1.
    List,
    /// Add a rule (words KEY=VALUE; none: every answer).
    Add { rule: Vec<String> },
    /// Delete rule N (as `list` numbers them), or `all`.
    Del { which: String },
}

/// Arguments of `xdns probe`.
#[derive(Debug, Args)]
struct ProbeArgs {
    /// The server (ADDR, ADDR:PORT or [V6]:PORT; port 53 by default).
    #[arg(required_unless_present = "reflect")]
    server: Option<String>,
    /// Probes per second.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Seconds to probe.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// The question, "NAME TYPE".
    #[arg(long, default_value = ". SOA")]
    query: String,
    /// A no-op reflector on the same path (`xdns probe --reflect`), probed the same way first.
    #[arg(long)]
    baseline: Option<String>,
    /// Run the no-op reflector on this address instead (until killed).
    #[arg(long, conflicts_with_all = ["server", "baseline"])]
    reflect: Option<String>,
    /// Print one line of JSON (percentiles in ns) instead of the table and charts.
    #[arg(long)]
    json: bool,
}

/// Arguments of `xdns guard`.
#[derive(Debug, Args)]
struct GuardArgs {
    #[command(flatten)]
    control: ControlArgs,
    #[command(subcommand)]
    action: GuardAction,
}

#[derive(Debug, Subcommand)]
enum GuardAction {
    /// Blocked entries (JSON): target, origin, reason, rate, age, expiry, tier.
    List,
    /// Drop everything from ADDR[/LEN] until unblocked, or for a while (`--for 10m`).
    Block {
        prefix: String,
        /// How long: 90, 90s, 10m, 2h, 1d.
        #[arg(long = "for")]
        duration: Option<String>,
    },
    /// Lift a block made with `block`.
    Unblock { prefix: String },
}

/// Arguments of `xdns flush`.
#[derive(Debug, Args)]
struct FlushArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// Forget only this name: its answers of every type (kernel cache included), its zone
    /// cut, server addresses and cached failures, and NXDOMAIN records at or above it.
    name: Option<String>,
    /// With NAME: also every name below it.
    #[arg(long, requires = "name")]
    subtree: bool,
}

/// How to find a running server's control socket.
#[derive(Debug, Args)]
struct ControlArgs {
    /// Take the control socket path from this configuration file.
    #[arg(short, long, conflicts_with = "control")]
    config: Option<PathBuf>,
    /// Control socket path.
    #[arg(long)]
    control: Option<PathBuf>,
}

impl ControlArgs {
    /// The socket path: `--control`, else the configuration's `control`, else the default.
    fn path(&self) -> Result<PathBuf, config::ConfigError> {
        match (&self.control, &self.config) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(c)) => config::control_path(c),
            (None, None) => Ok(PathBuf::from(config::DEFAULT_CONTROL)),
        }
    }
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Configuration file.
    #[arg(short, long)]
    config: PathBuf,
    /// Listen address (UDP and TCP); repeat for several; replaces `listen` from the file.
    #[arg(long = "listen", value_name = "ADDR")]
    listen: Vec<SocketAddr>,
    /// Control socket path; replaces `control`.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Prometheus endpoint address; replaces `metrics`.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// UDP worker threads per listen address (0 = one per core); replaces `udp_workers`.
    #[arg(long)]
    udp_workers: Option<usize>,
    /// Log filter (`info`, `debug`, `xdns=trace`…); replaces `[log] level`. RUST_LOG wins.
    #[arg(long)]
    log_level: Option<String>,
    /// Restart without losing queries: load the configuration and zones, then take the
    /// listening sockets and XDP links of the server running on the control socket, which
    /// then exits. A configuration or zone error leaves that server serving. With no server
    /// running, start normally.
    #[arg(long)]
    takeover: bool,
}

#[derive(Debug, Args)]
struct StatsArgs {
    #[command(flatten)]
    socket: ControlArgs,
    /// Print a JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn print_config_errors(errs: &[config::ConfigError]) {
    for e in errs {
        eprintln!("{e}");
    }
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Under systemd with stderr going to the journal (JOURNAL_STREAM names it), log to the
    // journal natively: every field of an event (interface, zone, error, ...) becomes a
    // journal field (`journalctl -u xdns INTERFACE=eth0`). Otherwise, text on stderr.
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let journal = std::env::var_os("JOURNAL_STREAM")
        .is_some()
        .then(|| tracing_journald::layer().ok())
        .flatten();
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match journal {
        Some(layer) => registry.with(layer.with_syslog_identifier("xdns".into())).try_init(),
        None => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            registry.with(tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)).try_init()
        }
    };
    install_panic_hook();
}

/// Log panics (a bug in the engine on some input) through `tracing`, rate-limited: the query
/// path catches them per message, so without a limit one bad packet pattern floods the log.
fn install_panic_hook() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PANICS: AtomicU64 = AtomicU64::new(0);
    std::panic::set_hook(Box::new(|info| {
        let n = PANICS.fetch_add(1, Ordering::Relaxed);
        if should_log_panic(n) {
            tracing::error!(count = n + 1, "internal error (panic): {info}");
        }
    }));
}

/// The first 10 panics are logged, then one in 1000.
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is newer than our rust-version
fn should_log_panic(n: u64) -> bool {
    n < 10 || n % 1000 == 0
}

fn serve(args: ServeArgs) -> ExitCode {
    let over = Overrides {
        listen: args.listen,
        control: args.control,
        metrics: args.metrics,
        udp_workers: args.udp_workers,
        log_level: args.log_level,
    };
    let cfg = match config::load(&args.config, &over) {
        Ok(c) => c,
        Err(errs) => {
            print_config_errors(&errs);
            return ExitCode::FAILURE;
        }
    };
    init_logging(&cfg.log.level);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("xdns-rt")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xdns: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(server::run(cfg, over, args.takeover));
    // A zone load abandoned by a stop during start-up must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("xdns: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Lines printed by `check`: one per zone on success, one per error otherwise.
fn check_lines(cfg: &Config) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for src in &cfg.zones {
        match reload::load_guarded_with_warnings(src) {
            Ok(loaded) => {
                // FILE:LINE: reason, e.g. a signed zone's expired RRSIGs or broken NSEC chain
                warnings.extend(loaded.warnings.iter().map(|w| w.to_string()));
                let zone = loaded.zone;
                let info = reload::zone_info(&src.name, &zone);
                ok.push(format!(
                    "{}: serial {}, {} records",
                    info.name, info.serial, info.records
                ));
            }
            Err(errs) => errors.extend(errs.iter().map(|e| e.to_string())),
        }
    }
    if let Some(g) = &cfg.guard {
        match guard::load_lists(g) {
            Ok((block, allow, names)) => ok.push(format!(
                "guard: blocklist {} entries, allowlist {}, blocked names {}",
                block.len(),
                allow.len(),
                names.entries.len()
            )),
            Err(errs) => errors.extend(errs),
        }
    }
    if let Some(rs) = &cfg.resolver {
        match xdns_resolver::RootHints::load(&rs.root_hints) {
            Ok(h) => ok.push(format!(
                "resolver: root hints {}, {} servers",
                rs.root_hints.display(),
                h.servers.len()
            )),
            Err(errs) => errors.extend(errs.iter().map(|e| e.to_string())),
        }
    }
    (ok, errors, warnings)
}

/// What `check` says of each XDP interface: a warning where `mode = "native"` will lose the
/// kernel's answers (the same text the server logs at attach), and, for `auto`, the mode it
/// will pick where that is not the kernel's choice. Interfaces are asked about in the
/// namespace `check` runs in; one that is not there is said so (the server may run elsewhere).
fn check_xdp(cfg: &Config) -> (Vec<String>, Vec<String>) {
    let (mut notes, mut warnings) = (Vec::new(), Vec::new());
    for ifname in &cfg.xdp.interfaces {
        let peer = xdns_bpf::iface::veth_peer(ifname);
        if let Err(e) = &peer {
            warnings.push(format!("XDP: {ifname}: {e} (here; the server attaches where it runs)"));
            continue;
        }
        match cfg.xdp.mode {
            xdp::XdpMode::Native => warnings.extend(xdp::native_warning(ifname, &peer)),
            xdp::XdpMode::Auto => {
                if let (_, Some(reason)) = xdp::plan(cfg.xdp.mode, ifname, &peer) {
                    notes.push(format!("XDP: {ifname}: mode auto: {reason}"));
                }
            }
            xdp::XdpMode::Generic => {}
        }
    }
    (notes, warnings)
}

fn check(path: &Path) -> ExitCode {
    let cfg = match config::load(path, &Overrides::default()) {
        Ok(c) => c,
        Err(errs) => {
            print_config_errors(&errs);
            return ExitCode::FAILURE;
        }
    };
    let (ok, errors, zone_warnings) = check_lines(&cfg);
    for e in &errors {
        eprintln!("{e}");
    }
    if !errors.is_empty() {
        return ExitCode::FAILURE;
    }
    for line in ok {
        println!("{line}");
    }
    for w in zone_warnings {
        eprintln!("warning: {w}");
    }
    let (notes, warnings) = check_xdp(&cfg);
    for line in notes {
        println!("{line}");
    }
    for w in warnings {
        eprintln!("warning: {w}");
    }
    ExitCode::SUCCESS
}

fn stats(args: StatsArgs) -> ExitCode {
    let path = match args.socket.path() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match control::stats(&path) {
        Ok(snap) => {
            if args.json {
                match serde_json::to_string_pretty(&snap) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("xdns: error: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", snap.to_table());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xdns: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn flush(args: FlushArgs) -> ExitCode {
    let cmd = match (&args.name, args.subtree) {
        (None, _) => "flush".to_string(),
        (Some(n), false) => format!("flush name {n}"),
        (Some(n), true) => format!("flush subtree {n}"),
    };
    control_command(&args.control, &cmd)
}

fn guard(args: GuardArgs) -> ExitCode {
    let cmd = match &args.action {
        GuardAction::List => "guard list".to_string(),
        GuardAction::Block { prefix, duration: None } => format!("guard block {prefix}"),
        GuardAction::Block { prefix, duration: Some(d) } => format!("guard block {prefix} {d}"),
        GuardAction::Unblock { prefix } => format!("guard unblock {prefix}"),
    };
    control_command(&args.control, &cmd)
}

/// Send `cmd` over the control socket and print the reply (an `error...` reply: exit 1).
fn control_command(control: &ControlArgs, cmd: &str) -> ExitCode {
    let path = match control.path() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match control::request(&path, cmd) {
        Ok(reply) if reply.starts_with("error") => {
            eprintln!("xdns: {reply}");
            ExitCode::FAILURE
        }
        Ok(reply) => {
            println!("{reply}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xdns: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn telemetry_cmd(args: TelemetryArgs) -> ExitCode {
    let cmd = match &args.action {
        TelemetryAction::List => "telemetry list".to_string(),
        TelemetryAction::Add { rule } => format!("telemetry add {}", rule.join(" ")),
        TelemetryAction::Del { which } => format!("telemetry del {which}"),
    };
    control_command(&args.control, cmd.trim())
}

/// `ADDR`, `ADDR:PORT`, `[V6]:PORT`, `ADDR@PORT`: a socket address (port 53 by default).
fn probe_addr(text: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    config::parse_remote(text).ok_or_else(|| anyhow::anyhow!("`{text}` is not an address (ADDR, ADDR:PORT, [V6]:PORT)"))
}

fn probe_cmd(a: ProbeArgs) -> ExitCode {
    let go = || -> anyhow::Result<()> {
        if let Some(r) = &a.reflect {
            return probe::reflect(probe_addr(r)?);
        }
        let server = probe_addr(a.server.as_deref().unwrap_or_default())?;
        let (name, ty) = a.query.split_once(' ').ok_or_else(|| anyhow::anyhow!("--query: expected \"NAME TYPE\""))?;
        let qname = xdns_wire::name::from_presentation(name.trim()).map_err(|e| anyhow::anyhow!("--query: `{name}`: {e}"))?;
        let qtype = xdns_wire::rtype::from_name(ty.trim()).ok_or_else(|| anyhow::anyhow!("--query: `{ty}` is not a type"))?;
        if !(a.duration > 0.0 && a.duration < 86400.0) {
            anyhow::bail!("--duration: expected seconds, more than 0");
        }
        let d = std::time::Duration::from_secs_f64(a.duration);
        let base = match &a.baseline {
            Some(b) => Some(probe::run(probe_addr(b)?, a.rate, d, &qname, qtype)?),
            None => None,
        };
        let r = probe::run(server, a.rate, d, &qname, qtype)?;
        if a.json {
            println!("{}", probe::json(&r, base.as_ref()));
        } else {
            print!("{}", probe::report(&r, base.as_ref()));
        }
        Ok(())
    };
    match go() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xdns probe: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn zone(args: ZoneArgs) -> ExitCode {
    control_command(&args.control, &format!("zone {} {}", args.action, args.name))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(a) => serve(a),
        Command::Check { config } => check(&config),
        Command::Stats(a) => stats(a),
        Command::Flush(a) => flush(a),
        Command::Guard(a) => guard(a),
        Command::Manual { out } => match manual(&out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xdns: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Zone(a) => zone(a),
        Command::Telemetry(a) => telemetry_cmd(a),
        Command::Probe(a) => probe_cmd(a),
    }
}

/// `xdns manual --out DIR`: xdns.8 from the command line definition (clap_mangen), xdns.toml.5
/// from [`config_doc::KEYS`], and completions for bash, zsh and fish (clap_complete).
fn manual(out: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use clap::CommandFactory;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let cmd = Cli::command().name("xdns");
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).section("8").render(&mut page)?;
    std::fs::write(out.join("xdns.8"), page)?;
    std::fs::write(out.join("xdns.toml.5"), config_doc::manual_page(version_line()))?;
    for (shell, file) in [
        (clap_complete::Shell::Bash, "xdns.bash"),
        (clap_complete::Shell::Zsh, "_xdns"),
        (clap_complete::Shell::Fish, "xdns.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "xdns", &mut buf);
        std::fs::write(out.join(file), buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn panic_log_rate_limit() {
        let logged: Vec<u64> = (0..3000).filter(|&n| should_log_panic(n)).collect();
        assert_eq!(logged.len(), 10 + 2);
        assert_eq!(logged[10..], [1000, 2000]);
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn cli_parses() {
        let table: &[(&[&str], bool)] = &[
            (&["xdns", "serve", "--config", "a.toml"], true),
            (
                &[
                    "xdns",
                    "serve",
                    "--config",
                    "a.toml",
                    "--listen",
                    "127.0.0.1:5300",
                    "--listen",
                    "[::1]:5300",
                ],
                true,
            ),
            (
                &["xdns", "serve", "--config", "a.toml", "--listen", "nope"],
                false,
            ),
            (&["xdns", "serve"], false),
            (&["xdns", "serve", "-c", "a.toml", "--takeover"], true),
            (&["xdns", "serve", "-c", "a.toml", "--takeover=yes"], false),
            (&["xdns", "check", "--config", "a.toml"], true),
            (&["xdns", "stats", "--json"], true),
            (&["xdns", "stats", "--control", "/x.sock", "--json"], true),
            (
                &[
                    "xdns",
                    "stats",
                    "--control",
                    "/x.sock",
                    "--config",
                    "a.toml",
                ],
                false,
            ),
            (&["xdns", "frobnicate"], false),
        ];
        for (argv, ok) in table {
            assert_eq!(Cli::try_parse_from(*argv).is_ok(), *ok, "{argv:?}");
        }
        let Cli {
            command: Command::Serve(s),
        } = Cli::try_parse_from([
            "xdns",
            "serve",
            "-c",
            "a.toml",
            "--udp-workers",
            "3",
            "--listen",
            "127.0.0.1:1",
        ])
        .unwrap()
        else {
            panic!("not serve");
        };
        assert_eq!(s.udp_workers, Some(3));
        assert_eq!(s.listen, vec!["127.0.0.1:1".parse::<SocketAddr>().unwrap()]);
    }
}
