//! Random identifiers (uuid4, hex) from the OS entropy source, with a hashed-clock fallback
//! where `/dev/urandom` is missing.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) {
    // One syscall instead of open/read/close of /dev/urandom (ids are made on every turn).
    #[cfg(target_os = "linux")]
    {
        let mut done = 0;
        while done < buf.len() {
            // SAFETY: the pointer and length describe the unfilled rest of `buf`.
            let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        if done == buf.len() {
            return;
        }
    }
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(buf).is_ok() {
            return;
        }
    }
    // Fallback: SipHash keyed by the process-random RandomState over a counter and the clock.
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        );
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// `n` random bytes as lowercase hex (`2n` characters).
pub fn hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    fill(&mut buf);
    to_hex(&buf)
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// A random version-4 UUID, lowercase and hyphenated.
pub fn uuid4() -> String {
    let mut b = [0u8; 16];
    fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = to_hex(&b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A random u64 in `1..2^53` (safe as a JSON number in every client).
pub fn js_safe_id() -> u64 {
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
    fn hex_len() {
        assert_eq!(hex(6).len(), 12);
        assert!(js_safe_id() < (1 << 53));
    }
}
