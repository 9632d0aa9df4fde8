//! The one deterministic generator (xorshift64*) of the unit tests, the integration tests and
//! the benches: reproducible inputs from a seed, no dependency. Public so `tests/` and
//! `benches/` share it; nothing in the server uses it. The `CASHCODE_FUZZ_CASES` /
//! `CASHCODE_FUZZ_SEED` knobs of long property-test runs are test-only, so the release binary
//! never reads those variables.

/// A seeded xorshift64* stream.
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Self {
        Prng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`; `0` for `n == 0`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
/// Cases for a property test: `CASHCODE_FUZZ_CASES` when set (long runs), else `default`.
pub(crate) fn cases(default: usize) -> usize {
    std::env::var("CASHCODE_FUZZ_CASES").ok().and_then(|v| v.trim().parse::<usize>().ok()).map_or(default, |n| n.max(1))
}

#[cfg(test)]
/// Seed for a property test: `CASHCODE_FUZZ_SEED` when set (a long run explores new inputs),
/// else the test's fixed `default` so ordinary runs are reproducible.
pub(crate) fn seed(default: u64) -> u64 {
    std::env::var("CASHCODE_FUZZ_SEED").ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(default)
}
