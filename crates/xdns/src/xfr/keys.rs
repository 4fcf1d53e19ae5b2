//! `[[key]]`: TSIG keys (RFC 8945) as knotc and tsig-keygen write them, and the signing and
//! checking of messages with them (through `domain::tsig`, never by hand).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use domain::tsig::{Algorithm, Key, KeyName};

/// One configured key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyConfig {
    /// The key's name, lowercase with a trailing dot as it goes on the wire (`xfr.`).
    pub name: String,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`.
    pub algorithm: String,
    /// The decoded secret.
    pub secret: Vec<u8>,
}

/// The secret never reaches a log.
impl fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyConfig")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &"…")
            .finish()
    }
}

/// The algorithms accepted: HMAC-SHA1 is left out on purpose (RFC 8945 §6: NOT RECOMMENDED).
pub const ALGORITHMS: [&str; 3] = ["hmac-sha256", "hmac-sha384", "hmac-sha512"];

impl KeyConfig {
    /// A key from its three configuration values; the reason when one is invalid.
    pub fn parse(name: &str, algorithm: &str, secret: &str) -> Result<Self, String> {
        let lname = name.trim().to_ascii_lowercase();
        let lname = if lname.ends_with('.') { lname } else { format!("{lname}.") };
        if lname == "." || KeyName::from_str(&lname).is_err() {
            return Err(format!("key name `{name}` is not a domain name"));
        }
        let alg = algorithm.trim().to_ascii_lowercase();
        if !ALGORITHMS.contains(&alg.as_str()) {
            return Err(format!("key `{lname}`: algorithm `{algorithm}` is not one of {}", ALGORITHMS.join(", ")));
        }
        let secret: Vec<u8> = domain::utils::base64::decode(secret.trim())
            .map_err(|e| format!("key `{lname}`: secret is not base64: {e}"))?;
        if secret.is_empty() {
            return Err(format!("key `{lname}`: empty secret"));
        }
        let k = Self { name: lname, algorithm: alg, secret };
        k.key()?;
        Ok(k)
    }

    /// The key for `domain::tsig`.
    pub fn key(&self) -> Result<Arc<Key>, String> {
        let alg = Algorithm::from_str(&self.algorithm).map_err(|_| format!("algorithm `{}`", self.algorithm))?;
        let name = KeyName::from_str(&self.name).map_err(|e| format!("key name `{}`: {e}", self.name))?;
        Key::new(alg, &self.secret, name, None, None)
            .map(Arc::new)
            .map_err(|e| format!("key `{}`: {e}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::base::iana::Rcode;
    use domain::base::{Message, MessageBuilder, Name, Rtype};
    use domain::rdata::tsig::Time48;
    use domain::tsig::{ClientSequence, ClientTransaction, ServerSequence, ServerTransaction};

    const SECRET: &str = "Wm9uZSB0cmFuc2ZlcnMgZm9yIHhkbnMgdGVzdHMgb25seSE=";

    #[test]
    fn parses_as_tsig_keygen_writes() {
        let k = KeyConfig::parse("XFR", "HMAC-SHA256", SECRET).unwrap();
        assert_eq!(k.name, "xfr.");
        assert_eq!(k.algorithm, "hmac-sha256");
        assert_eq!(k.secret, b"Zone transfers for xdns tests only!");
        assert!(!format!("{k:?}").contains("Zone"), "the secret must not be printed");
        for (n, a, s, why) in [
            ("xfr", "hmac-md5", SECRET, "algorithm"),
            ("xfr", "hmac-sha1", SECRET, "algorithm"),
            ("xfr", "hmac-sha512", "not base64!", "base64"),
            ("xfr", "hmac-sha512", "", "empty"),
            ("a..b", "hmac-sha512", SECRET, "domain name"),
        ] {
            let e = KeyConfig::parse(n, a, s).unwrap_err();
            assert!(e.contains(why), "{n} {a} {s}: {e}");
        }
    }

    fn query(rtype: Rtype) -> domain::base::message_builder::AdditionalBuilder<Vec<u8>> {
        let mut b = MessageBuilder::new_vec();
        b.header_mut().set_id(0x4242);
        let mut q = b.question();
        q.push((Name::<Vec<u8>>::from_str("example.com.").unwrap(), rtype)).unwrap();
        q.additional()
    }

    /// Sign with one side, check with the other, for each algorithm; a different secret or a
    /// changed byte fails.
    #[test]
    fn sign_verify_round_trips() {
        for alg in ALGORITHMS {
            let key = KeyConfig::parse("xfr.", alg, SECRET).unwrap().key().unwrap();
            let other = KeyConfig::parse("xfr.", alg, "b3RoZXIgc2VjcmV0").unwrap().key().unwrap();
            let now = Time48::now();
            // a single transaction (NOTIFY)
            let mut req = query(Rtype::SOA);
            let client = ClientTransaction::request(key.clone(), &mut req, now).unwrap();
            let wire = req.finish();
            let mut msg = Message::from_octets(wire.clone()).unwrap();
            let server = ServerTransaction::request(&key, &mut msg, now).unwrap().expect("signed");
            let mut answer = MessageBuilder::new_vec().start_answer(&msg, Rcode::NOERROR).unwrap().additional();
            server.answer(&mut answer, now).unwrap();
            let mut answer = Message::from_octets(answer.finish()).unwrap();
            client.answer(&mut answer, now).unwrap();
            // the wrong key is refused, and so is a modified message
            let mut msg = Message::from_octets(wire.clone()).unwrap();
            assert!(ServerTransaction::request(&other, &mut msg, now).is_err(), "{alg}: wrong key accepted");
            let mut bent = wire.clone();
            bent[12 + 3] ^= 1; // a letter of the question name
            let mut msg = Message::from_octets(bent).unwrap();
            assert!(ServerTransaction::request(&key, &mut msg, now).is_err(), "{alg}: changed message accepted");

            // a sequence (AXFR/IXFR): three answers, each checked in turn
            let mut req = query(Rtype::AXFR);
            let mut client = ClientSequence::request(key.clone(), &mut req, now).unwrap();
            let mut msg = Message::from_octets(req.finish()).unwrap();
            let mut server = ServerSequence::request(&key, &mut msg, now).unwrap().unwrap();
            for _ in 0..3 {
                let mut a = MessageBuilder::new_vec().start_answer(&msg, Rcode::NOERROR).unwrap().additional();
                server.answer(&mut a, now).unwrap();
                let mut a = Message::from_octets(a.finish()).unwrap();
                client.answer(&mut a, now).unwrap();
            }
            client.done().unwrap();
        }
    }
}
