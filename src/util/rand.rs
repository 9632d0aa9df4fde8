//! Random identifiers (uuid4, hex, JSON-safe ids) from the OS entropy source, through the
//! `getrandom` crate (getrandom(2) on Linux, `/dev/urandom` where the syscall is missing). Any
//! thread calls these.
//!
//! There is no fallback: chat ids, request ids and stream ids must not be guessable, and a
//! hashed clock is guessable. `app::run` calls [`check`] before serving, so a host without
//! entropy fails start-up with a message; after that first success the OS source does not fail,
//! and a failure anyway is a panic (a bug in the host) rather than an id made up quietly.

/// Whether the OS entropy source answers; `app::run` refuses to start when it does not.
pub(crate) fn check() -> Result<(), String> {
    let mut probe = [0u8; 16];
    getrandom::fill(&mut probe).map_err(|e| format!("the OS entropy source is unavailable: {e}"))
}

/// Fills `buf` with random bytes. Panics if the OS entropy source fails (see the module note:
/// [`check`] has already succeeded at start-up).
pub(crate) fn fill(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("the OS entropy source failed after start-up: {e}");
    }
}

/// `n` random bytes as lowercase hex (`2n` characters).
pub(crate) fn hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    fill(&mut buf);
    to_hex(&buf)
}

/// Lowercase hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// A random version-4 UUID, lowercase and hyphenated.
pub(crate) fn uuid4() -> String {
    let mut b = [0u8; 16];
    fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = to_hex(&b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A random u64 in `1..2^53` (safe as a JSON number in every client).
pub(crate) fn js_safe_id() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    (u64::from_le_bytes(b) & ((1u64 << 53) - 1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_shape() {
        let u = uuid4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(u, uuid4());
    }

    #[test]
    fn the_os_source_answers_and_fills_everything() {
        assert_eq!(check(), Ok(()));
        // 64 bytes all zero after a fill is a 2^-512 event: the buffer was not written.
        let mut b = [0u8; 64];
        fill(&mut b);
        assert!(b.iter().any(|&x| x != 0));
        assert_ne!(hex(16), hex(16));
    }

    #[test]
    fn hex_len() {
        assert_eq!(hex(6).len(), 12);
        assert!(js_safe_id() < (1 << 53));
    }
}
