//! `xdns check`: exit codes and `FILE:LINE: reason` messages for configuration and zone errors.

mod common;

use std::process::{Command, Output};

use common::*;

fn check(config: &std::path::Path) -> Output {
    Command::new(bin())
        .args(["check", "--config"])
        .arg(config)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn good_config_prints_zone_summaries() {
    let dir = TempDir::new("check-good");
    let zones = zones_dir();
    let cfg = dir.write(
        "xdns.toml",
        &format!(
            "[[zone]]\nname = \"example.com.\"\nfile = \"{}\"\n[[zone]]\nname = \"example.net\"\nfile = \"{}\"\n",
            zones.join("example.com.zone").display(),
            zones.join("example.net.zone").display()
        ),
    );
    let out = check(&cfg);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("example.com.: serial 2024060101,"),
        "{stdout}"
    );
    assert!(stdout.contains("example.net.: serial 7,"), "{stdout}");
    assert!(stdout.contains("records"), "{stdout}");
}

#[test]
fn relative_zone_paths_follow_the_config_file() {
    let dir = TempDir::new("check-rel");
    dir.write("z.zone", &zone_text(3, 10));
    let cfg = dir.write(
        "xdns.toml",
        "[[zone]]\nname = \"example.com.\"\nfile = \"z.zone\"\n",
    );
    // Run from elsewhere: the path must still resolve.
    let out = Command::new(bin())
        .current_dir("/")
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("example.com.: serial 3, 5 records"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn config_errors_name_file_and_line() {
    let dir = TempDir::new("check-cfg");
    // (config text, line, text the message must contain)
    let table: &[(&str, usize, &str)] = &[
        (
            "listen = [\"127.0.0.1:53\"]\nlisten_extra = 1\n",
            2,
            "listen_extra",
        ),
        ("[tcp]\nmax_pipelined = 3\nfoo = 1\n", 3, "foo"),
        ("listen = [\"127.0.0.1:99999\"]\n", 1, "127.0.0.1:99999"),
        (
            "[[zone]]\nname = \"example.com.\"\nfile = \"nowhere.zone\"\n",
            3,
            "nowhere.zone",
        ),
    ];
    for (cfg_text, line, needle) in table {
        let cfg = dir.write("xdns.toml", cfg_text);
        let out = check(&cfg);
        assert_eq!(out.status.code(), Some(1), "{cfg_text}");
        let err = text(&out.stderr);
        let prefix = format!("{}:{}: ", cfg.display(), line);
        assert!(
            err.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(needle)),
            "{cfg_text}: {err}"
        );
    }
}

#[test]
fn missing_config_file_fails() {
    let out = check(std::path::Path::new("/nonexistent/xdns.toml"));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("/nonexistent/xdns.toml: "));
}

#[test]
fn bad_zones_fail_with_file_and_line() {
    let bad = zones_dir().join("bad");
    let dir = TempDir::new("check-bad");
    let mut seen = 0;
    for entry in std::fs::read_dir(&bad).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("zone") {
            continue;
        }
        seen += 1;
        let zone = std::fs::canonicalize(&path).unwrap();
        let expect = std::fs::read_to_string(&zone).unwrap();
        let expect = expect.lines().nth(1).unwrap_or_default().to_string();
        let cfg = dir.write(
            "xdns.toml",
            &format!(
                "[[zone]]\nname = \"example.com.\"\nfile = \"{}\"\n",
                zone.display()
            ),
        );
        let out = check(&cfg);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {err}", zone.display());
        assert!(out.stdout.is_empty(), "no summary on failure");
        // `; expect: line N` / `; expect: other.inc line N` / `; expect: no line ...`
        let words: Vec<&str> = expect.trim_start_matches(';').split_whitespace().collect();
        let want = match words.as_slice() {
            ["expect:", "no", ..] => format!("{}: ", zone.display()),
            ["expect:", "line", n, ..] => format!("{}:{}: ", zone.display(), n),
            ["expect:", file, "line", n, ..] => {
                format!("{}:{}: ", zone.with_file_name(file).display(), n)
            }
            _ => format!("{}: ", zone.display()),
        };
        assert!(
            err.lines().any(|l| l.starts_with(&want)),
            "{}: want `{want}…` in {err}",
            zone.display()
        );
    }
    assert!(seen >= 5, "bad zones not found in {}", bad.display());
}

/// `xdns --help` says what xdns is (authoritative and resolver) and lists every command; the
/// usage block in main.rs's docs (the binary's rustdoc) names the same commands.
#[test]
fn help_names_every_command_and_both_roles() {
    let out = Command::new(bin()).arg("--help").output().unwrap();
    let help = text(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(help.contains("Authoritative DNS server and caching resolver"), "{help}");
    let usage = include_str!("../src/main.rs");
    for cmd in ["serve", "check", "stats", "flush", "guard"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(cmd)), "--help lacks {cmd}: {help}");
        assert!(usage.contains(&format!("//! xdns {cmd} ")), "main.rs usage block lacks {cmd}");
    }
}
