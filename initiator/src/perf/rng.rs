//! Cheap deterministic randomness for the measured loop: a xorshift64* generator and a
//! full-cycle permutation of `0..n` (every unit once per pass, like fio's random map),
//! so two in-flight I/Os never touch the same unit while a pass is longer than the
//! queue depth. No allocation, no syscalls.

/// The golden-ratio increment of splitmix64, used to spread seeds.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64: one step of a high-quality 64-bit mixer (seeds, patterns).
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GOLDEN);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xorshift64* (Vigna): fast, good enough for choosing offsets and mixes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut s = seed;
        // Never zero: xorshift's one fixed point.
        Rng(splitmix64(&mut s) | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (Lemire) without division.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A permutation of `0..n`: a full-period LCG modulo the next power of two, skipping
/// values `>= n` (at most half the steps).
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    mask: u64,
    a: u64,
    c: u64,
    x: u64,
}

impl Permutation {
    pub fn new(n: u64, seed: u64) -> Permutation {
        let m = n.max(1).next_power_of_two();
        let mut s = seed;
        // Hull–Dobell: c odd and a ≡ 1 (mod 4) give period m for a power-of-two m.
        let a = (splitmix64(&mut s) & !3) | 1;
        let c = splitmix64(&mut s) | 1;
        let x = splitmix64(&mut s);
        Permutation {
            n: n.max(1),
            mask: m - 1,
            a,
            c,
            x: x & (m - 1),
        }
    }

    /// The next element; after `n` calls every value of `0..n` came exactly once.
    #[inline]
    pub fn next_index(&mut self) -> u64 {
        loop {
            self.x = self.x.wrapping_mul(self.a).wrapping_add(self.c) & self.mask;
            if self.x < self.n {
                return self.x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_covers_every_unit_once_per_pass() {
        for n in [1u64, 2, 3, 7, 100, 1000, 4096] {
            let mut p = Permutation::new(n, 42 + n);
            for _pass in 0..2 {
                let mut seen = vec![false; n as usize];
                for _ in 0..n {
                    let i = p.next_index() as usize;
                    assert!(!seen[i], "n={n}: {i} twice in one pass");
                    seen[i] = true;
                }
                assert!(seen.iter().all(|&s| s));
            }
        }
    }

    #[test]
    fn rng_below_is_in_range_and_spread() {
        let mut r = Rng::new(7);
        let mut hist = [0u32; 10];
        for _ in 0..10_000 {
            let v = r.below(10);
            hist[v as usize] += 1;
        }
        assert!(hist.iter().all(|&h| h > 800 && h < 1200), "{hist:?}");
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
