//! A tiny deterministic PRNG (xorshift64*) for the property tests, with the `CASHCODE_FUZZ_CASES`
//! / `CASHCODE_FUZZ_SEED` knobs of long runs: reproducible inputs from a seed, no dependency.
//! Test-only (`#[cfg(test)]` in `util/mod.rs`), so the release binary never reads those
//! variables; the benches keep their own generator in `benches/shared`.

pub(crate) struct Prng(u64);

impl Prng {
    pub(crate) fn new(seed: u64) -> Self {
        Prng(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`; `0` for `n == 0`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `len` random bytes.
    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// Cases for a property test: `CASHCODE_FUZZ_CASES` when set (long runs), else `default`.
pub(crate) fn cases(default: usize) -> usize {
    std::env::var("CASHCODE_FUZZ_CASES").ok().and_then(|v| v.trim().parse::<usize>().ok()).map_or(default, |n| n.max(1))
}

/// Seed for a property test: `CASHCODE_FUZZ_SEED` when set (a long run explores new inputs),
/// else the test's fixed `default` so ordinary runs are reproducible.
pub(crate) fn seed(default: u64) -> u64 {
    std::env::var("CASHCODE_FUZZ_SEED").ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(default)
}
