//! Catalog zones (RFC 9432): a `[[catalog]]` is transferred like any secondary zone, and
//! each version's members (`<id>.zones.<catalog> PTR <member>`) become secondary zones of the
//! same primaries and key, added and removed as the catalog changes, without a configuration
//! edit or restart. A catalog that is not schema version 2, or a member that is odd (two PTR
//! records, a name already configured here), is logged and leaves the zones served alone.
//!
//! When the catalog has a `file`, each member's last good copy is kept in the directory
//! `FILE.members/` beside it (one `NAME.zone` per member, written as a secondary zone's
//! `file` is): after a restart the catalog's stored copy names the members, each is served
//! from its own copy until a primary answers, and expires like any secondary zone (counted
//! from the copy's modification time). A member removed from the catalog has its copy deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xdns_zone::load::key_to_text;
use xdns_zone::Zone;

use super::secondary::{Role, Secondary};
use crate::config::SecondaryConfig;
use crate::server::Shared;

/// PTR and TXT.
const PTR: u16 = 12;
const TXT: u16 = 16;

/// The members named by a catalog zone (presentation form, lowercase), or why it is not a
/// usable catalog.
pub fn members(zone: &Zone) -> Result<Vec<String>, String> {
    let mut version = b"\x07version".to_vec();
    version.extend_from_slice(&zone.apex);
    let v = zone.nodes.get(&version[..]).and_then(|n| n.rrset(TXT)).map(|r| r.rdata.clone()).unwrap_or_default();
    if v.len() != 1 || &v[0][..] != b"\x012" {
        return Err("not a catalog of schema version 2 (RFC 9432 §4.2: version TXT \"2\")".into());
    }
    let mut suffix = b"\x05zones".to_vec();
    suffix.extend_from_slice(&zone.apex);
    let mut out = Vec::new();
    for (owner, node) in &zone.nodes {
        // exactly one label (the member's unique id) above zones.<catalog>
        let Some(first) = owner.first().map(|&l| l as usize) else { continue };
        if owner.len() != 1 + first + suffix.len() || !owner.ends_with(&suffix) {
            continue;
        }
        let Some(ptr) = node.rrset(PTR) else { continue };
        if ptr.rdata.len() != 1 {
            tracing::warn!(member = %key_to_text(owner), "catalog member with more than one PTR: ignored (RFC 9432 §4.3)");
            continue;
        }
        let name = key_to_text(&ptr.rdata[0].to_ascii_lowercase());
        if name.contains("<malformed>") {
            continue;
        }
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Make the member zones those of `zone`, a new version of the catalog `cat`.
pub async fn sync(shared: &Arc<Shared>, cat: &Arc<Secondary>, zone: &Zone) {
    let Some(reg) = shared.served.load().xfr.clone() else { return };
    let wanted = match members(zone) {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(catalog = %cat.cfg.name, error = %e, "catalog ignored: its members stay as they were");
            return;
        }
    };
    let role = Role::Member(cat.cfg.name.clone());
    let current: Vec<Arc<Secondary>> = reg.list().into_iter().filter(|s| s.role == role).collect();
    for s in &current {
        if !wanted.contains(&s.cfg.name) {
            tracing::info!(catalog = %cat.cfg.name, zone = %s.cfg.name, "member removed from the catalog");
            reg_remove(&reg, s);
        }
    }
    let configured: Vec<String> = shared.served.load().loaded.iter().map(|l| l.source.name.clone()).collect();
    for name in wanted {
        if current.iter().any(|s| s.cfg.name == name) {
            continue;
        }
        if reg.by_name(&name).is_some() || configured.contains(&name) {
            tracing::warn!(catalog = %cat.cfg.name, zone = %name, "catalog member is already a zone here: ignored");
            continue;
        }
        let file = cat.cfg.file.as_deref().map(|f| member_file(f, &name));
        let cfg = SecondaryConfig { name: name.clone(), primaries: cat.cfg.primaries.clone(), key: cat.cfg.key.clone(), file };
        if let Some(sec) = Secondary::new(cfg, role.clone()) {
            if reg_add(&reg, sec) {
                tracing::info!(catalog = %cat.cfg.name, zone = %name, "member added from the catalog");
            }
        }
    }
}

/// Where the member `name` of the catalog stored at `catalog_file` keeps its last good copy:
/// `CATALOG_FILE.members/NAME.zone` (`name` lowercase with its final dot; a character other
/// than a letter, digit, `-`, `_` or `.` is written `%XX`, so that no name leaves the
/// directory or collides with another).
pub fn member_file(catalog_file: &Path, name: &str) -> PathBuf {
    let mut dir = catalog_file.as_os_str().to_owned();
    dir.push(".members");
    let mut safe = String::with_capacity(name.len() + 4);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && !safe.is_empty()) {
            safe.push(b as char);
        } else {
            safe.push_str(&format!("%{b:02X}"));
        }
    }
    safe.push_str("zone");
    PathBuf::from(dir).join(safe)
}

fn reg_add(reg: &super::Registry, sec: Arc<Secondary>) -> bool {
    reg.add(sec)
}

fn reg_remove(reg: &super::Registry, sec: &Secondary) {
    let _ = reg.remove(&sec.apex);
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdns_zone::{load_zone, ZoneSource};

    #[test]
    fn members_of_a_catalog() {
        let dir = std::env::temp_dir().join(format!("xdns-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |text: &str| {
            std::fs::write(dir.join("c.zone"), text).unwrap();
            load_zone(&ZoneSource { name: "catalog.invalid.".into(), file: dir.join("c.zone") }, None).unwrap()
        };
        let head = "$TTL 0\n@ SOA invalid. invalid. 1 60 60 600 0\n@ NS invalid.\n";
        let z = load(&format!(
            "{head}version TXT \"2\"\nm1.zones PTR Example.ORG.\nm2.zones PTR example.net.\n\
             a.b.zones PTR too.deep.\nm3.zones TXT \"no ptr\"\nm2.zones.x TXT \"elsewhere\"\n\
             m4.zones PTR one.\nm4.zones PTR two.\n"
        ));
        assert_eq!(members(&z).unwrap(), vec!["example.net.", "example.org."]);
        let z = load(&format!("{head}version TXT \"1\"\nm1.zones PTR example.org.\n"));
        assert!(members(&z).unwrap_err().contains("version"));
        let z = load(&format!("{head}m1.zones PTR example.org.\n"));
        assert!(members(&z).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn member_files_stay_in_their_directory() {
        let f = Path::new("/var/cache/xdns/catalog.zone");
        let dir = Path::new("/var/cache/xdns/catalog.zone.members");
        assert_eq!(member_file(f, "example.org."), dir.join("example.org.zone"));
        assert_eq!(member_file(f, "a_b-c.example."), dir.join("a_b-c.example.zone"));
        // a leading dot, a slash or other bytes are escaped: never `..`, never a subdirectory
        assert_eq!(member_file(f, "..x."), dir.join("%2E.x.zone"));
        assert_eq!(member_file(f, "a/b.\\."), dir.join("a%2Fb.%5C.zone"));
        assert_eq!(member_file(f, "."), dir.join("%2Ezone"));
        assert_eq!(member_file(f, "a%b."), dir.join("a%25b.zone"));
    }
}
