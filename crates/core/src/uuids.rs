//! CouchDB's uuid algorithms (`[uuids] algorithm`), as `/_uuids` and new document ids use
//! them. Entropy and the clock are passed in, so every algorithm is a pure function of its
//! inputs and state.
//!
//! - `random`: 32 hex digits from 16 random bytes.
//! - `sequential`: a random 26-hex-digit prefix and a 6-hex-digit counter that grows by a
//!   random step in `1..0xffe`; once the counter reaches `0xfff000` the next id gets a new
//!   prefix. Ids from one generator sort in creation order until the prefix changes.
//! - `utc_random`: 14 hex digits of microseconds since the epoch, then 18 random hex digits.
//! - `utc_id`: the same 14 digits, then `[uuids] utc_id_suffix`.
//!
//! The time prefix never repeats or goes back within one generator (a clock step backwards
//! or two ids in one microsecond advance it by one), so `utc_*` ids sort in creation order.

use md5::{Digest, Md5};

/// A configured algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Algorithm {
    Random,
    Sequential,
    UtcRandom,
    UtcId(String),
}

impl Algorithm {
    /// `[uuids] algorithm` and `utc_id_suffix`; an unknown name is returned as the error.
    pub fn parse(name: &str, utc_id_suffix: &str) -> Result<Algorithm, String> {
        Ok(match name.trim() {
            "random" => Algorithm::Random,
            "sequential" => Algorithm::Sequential,
            "utc_random" => Algorithm::UtcRandom,
            "utc_id" => Algorithm::UtcId(utc_id_suffix.to_string()),
            other => return Err(other.to_string()),
        })
    }
}

/// The state of one algorithm's generator.
#[derive(Debug, Clone)]
pub struct Generator {
    algorithm: Algorithm,
    /// `sequential`: the current prefix and counter (set on first use).
    sequence: Option<(String, u32)>,
    /// `utc_*`: the last time prefix handed out.
    last_micros: u64,
}

/// Source of random bytes.
pub type Entropy<'a> = &'a mut dyn FnMut(&mut [u8]);

fn random_hex(entropy: Entropy, n: usize) -> String {
    let mut bytes = vec![0u8; n];
    entropy(&mut bytes);
    hex::encode(bytes)
}

/// A counter step in `1..0xffe`, as CouchDB draws it.
fn step(entropy: Entropy) -> u32 {
    let mut b = [0u8; 4];
    entropy(&mut b);
    1 + u32::from_be_bytes(b) % 0xffd
}

impl Generator {
    pub fn new(algorithm: Algorithm) -> Generator {
        Generator {
            algorithm,
            sequence: None,
            last_micros: 0,
        }
    }

    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// The next id, at `now_micros` (microseconds since the Unix epoch).
    pub fn next(&mut self, entropy: Entropy, now_micros: u64) -> String {
        match self.algorithm.clone() {
            Algorithm::Random => random_hex(entropy, 16),
            Algorithm::Sequential => self.next_sequential(entropy),
            Algorithm::UtcRandom => {
                let prefix = self.time_prefix(now_micros);
                prefix + &random_hex(entropy, 9)
            }
            Algorithm::UtcId(suffix) => self.time_prefix(now_micros) + &suffix,
        }
    }

    fn next_sequential(&mut self, entropy: Entropy) -> String {
        let (prefix, seq) = match self.sequence.take() {
            Some(s) => s,
            None => (random_hex(entropy, 13), step(entropy)),
        };
        let id = format!("{prefix}{seq:06x}");
        self.sequence = Some(if seq >= 0xfff000 {
            (random_hex(entropy, 13), step(entropy))
        } else {
            (prefix, seq + step(entropy))
        });
        id
    }

    fn time_prefix(&mut self, now_micros: u64) -> String {
        let micros = now_micros.max(self.last_micros + 1);
        self.last_micros = micros;
        format!("{micros:014x}")
    }
}

/// CouchDB's ETag of a list of strings (`make_etag/1`): the MD5 of the list's Erlang
/// external term format (a list of binaries), as a quoted base-36 number.
pub fn etag_of_strings(items: &[String]) -> String {
    let mut term = vec![131u8];
    if items.is_empty() {
        term.push(106);
    } else {
        term.push(108);
        term.extend_from_slice(&(items.len() as u32).to_be_bytes());
        for s in items {
            term.push(109);
            term.extend_from_slice(&(s.len() as u32).to_be_bytes());
            term.extend_from_slice(s.as_bytes());
        }
        term.push(106);
    }
    let digest: [u8; 16] = Md5::digest(&term).into();
    format!("\"{}\"", base36(u128::from_be_bytes(digest)))
}

/// Upper-case base 36, as Erlang's `~.36B`.
fn base36(mut n: u128) -> String {
    const DIGITS: &[u8; 36] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic byte source.
    fn counter() -> impl FnMut(&mut [u8]) {
        let mut n = 0u8;
        move |buf: &mut [u8]| {
            for b in buf {
                n = n.wrapping_add(37);
                *b = n;
            }
        }
    }

    #[test]
    fn parse_names() {
        assert_eq!(Algorithm::parse("random", ""), Ok(Algorithm::Random));
        assert_eq!(
            Algorithm::parse("sequential", ""),
            Ok(Algorithm::Sequential)
        );
        assert_eq!(Algorithm::parse("utc_random", ""), Ok(Algorithm::UtcRandom));
        assert_eq!(
            Algorithm::parse("utc_id", "frog"),
            Ok(Algorithm::UtcId("frog".into()))
        );
        assert_eq!(Algorithm::parse("bogus", ""), Err("bogus".into()));
    }

    #[test]
    fn random_ids() {
        let mut e = counter();
        let id = Generator::new(Algorithm::Random).next(&mut e, 0);
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn sequential_ids_increase_and_roll_over() {
        let mut e = counter();
        let mut g = Generator::new(Algorithm::Sequential);
        let ids: Vec<String> = (0..2000).map(|_| g.next(&mut e, 0)).collect();
        for w in ids.windows(2) {
            assert_eq!(w[0].len(), 32);
            assert_eq!(w[0][..26], w[1][..26], "one prefix");
            assert!(w[0] < w[1]);
        }
        // near the end of the counter range the prefix changes
        g.sequence = Some(("a".repeat(26), 0xfff000));
        let last = g.next(&mut e, 0);
        assert_eq!(last, format!("{}fff000", "a".repeat(26)));
        assert_ne!(g.next(&mut e, 0)[..26], "a".repeat(26));
    }

    #[test]
    fn utc_ids_are_monotonic() {
        let mut e = counter();
        let mut g = Generator::new(Algorithm::UtcId("frog".into()));
        let a = g.next(&mut e, 0x1234);
        assert_eq!(a, "00000000001234frog");
        let b = g.next(&mut e, 0x1234);
        assert_eq!(b, "00000000001235frog", "same microsecond advances");
        let c = g.next(&mut e, 0x1000);
        assert_eq!(c, "00000000001236frog", "the clock going back does not");
        let mut r = Generator::new(Algorithm::UtcRandom);
        let id = r.next(&mut e, 1_700_000_000_000_000);
        assert_eq!(id.len(), 32);
        assert_eq!(&id[..14], "060a24181e4000");
    }

    #[test]
    fn etags_as_couchdb_computes_them() {
        // term_to_binary([]) = <<131,106>>
        let empty: [u8; 16] = Md5::digest([131u8, 106]).into();
        assert_eq!(
            etag_of_strings(&[]),
            format!("\"{}\"", base36(u128::from_be_bytes(empty)))
        );
        // term_to_binary([<<"a">>]) = <<131,108,0,0,0,1,109,0,0,0,1,97,106>>
        let one: [u8; 16] = Md5::digest([131u8, 108, 0, 0, 0, 1, 109, 0, 0, 0, 1, 97, 106]).into();
        assert_eq!(
            etag_of_strings(&["a".to_string()]),
            format!("\"{}\"", base36(u128::from_be_bytes(one)))
        );
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "Z");
        assert_eq!(base36(36), "10");
    }
}
