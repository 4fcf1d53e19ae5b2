//! RR type numbers: the one table of xdns, taken from `domain`'s IANA registry
//! ([`domain::base::iana::Rtype`]).
//!
//! xdns carries types as plain `u16` (the kernel ABI, cache keys, wire offsets), and `match`
//! patterns need constants of that type, so each name here is `Rtype::NAME.to_int()`: the
//! numbers are `domain`'s, none is written by hand. The crates that used to keep their own
//! lists (`xdns_zone::lookup::rtype`, `xdns_resolver::msg::rtype`) re-export this module.
//! Names of types (for messages and statistics) come from `Rtype`'s `Display`
//! (`TYPE65400` for unknown ones).

use domain::base::iana::Rtype;

macro_rules! from_domain {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (`domain::base::iana::Rtype::", stringify!($name), "`).")]
            pub const $name: u16 = Rtype::$name.to_int();
        )*
    };
}

from_domain!(
    A, NS, CNAME, SOA, PTR, MX, TXT, AAAA, SRV, NAPTR, DNAME, OPT, DS, RRSIG, NSEC, DNSKEY,
    NSEC3, NSEC3PARAM, TLSA, CDS, CDNSKEY, SVCB, HTTPS, IXFR, AXFR, ANY,
);

/// The name of a type as in a zone file: `A`, `HTTPS`, `TYPE65400` (RFC 3597 §5).
pub fn name(rtype: u16) -> String {
    Rtype::from_int(rtype).to_string()
}

/// The type of a mnemonic (`A`, `aaaa`, `TYPE65400`) or a plain number; `None` if neither.
pub fn from_name(text: &str) -> Option<u16> {
    if let Ok(n) = text.parse::<u16>() {
        return Some(n);
    }
    text.to_ascii_uppercase().parse::<Rtype>().ok().map(|t| t.to_int())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers are the IANA registry's (a few checked by hand against RFC 1035, 3596,
    /// 6672, 6891, 4034, 9460 and 1995/5936), and names print as in zone files.
    #[test]
    fn numbers_and_names() {
        let table: &[(u16, u16, &str)] = &[
            (A, 1, "A"),
            (NS, 2, "NS"),
            (CNAME, 5, "CNAME"),
            (SOA, 6, "SOA"),
            (PTR, 12, "PTR"),
            (MX, 15, "MX"),
            (TXT, 16, "TXT"),
            (AAAA, 28, "AAAA"),
            (SRV, 33, "SRV"),
            (NAPTR, 35, "NAPTR"),
            (DNAME, 39, "DNAME"),
            (OPT, 41, "OPT"),
            (DS, 43, "DS"),
            (RRSIG, 46, "RRSIG"),
            (NSEC, 47, "NSEC"),
            (DNSKEY, 48, "DNSKEY"),
            (NSEC3, 50, "NSEC3"),
            (TLSA, 52, "TLSA"),
            (SVCB, 64, "SVCB"),
            (HTTPS, 65, "HTTPS"),
            (IXFR, 251, "IXFR"),
            (AXFR, 252, "AXFR"),
            (ANY, 255, "ANY"),
        ];
        for &(got, want, text) in table {
            assert_eq!(got, want, "{text}");
            assert_eq!(name(got), text);
        }
        assert_eq!(name(65400), "TYPE65400");
    }

    #[test]
    fn types_from_names() {
        assert_eq!(from_name("A"), Some(A));
        assert_eq!(from_name("aaaa"), Some(AAAA));
        assert_eq!(from_name("TYPE65400"), Some(65400));
        assert_eq!(from_name("99"), Some(99));
        assert_eq!(from_name("NOPE"), None);
    }
}
