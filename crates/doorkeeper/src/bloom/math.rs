//! Sizing model of the blocked filter: false-positive rate from per-block Poisson occupancy.
//! The model is documented on [`Sizing`].

/// Bits in one block: one 64-byte cache line.
pub(crate) const BLOCK_BITS: u64 = 512;

/// Most bit positions per key. Beyond this the sizing model's alternating sum loses precision
/// and the blocked layout gains nothing (its optimum k is below the unblocked one).
pub const MAX_HASHES: u32 = 24;

/// The false-positive model for `k` positions per key in 512-bit blocks.
#[derive(Debug, Clone)]
pub(crate) struct BlockModel {
    coefficients: Vec<f64>,
    rates: Vec<f64>,
}

impl BlockModel {
    pub(crate) fn new(num_hashes: u32) -> Self {
        assert!(
            (1..=MAX_HASHES).contains(&num_hashes),
            "num_hashes {num_hashes} outside 1..={MAX_HASHES}"
        );
        let k = num_hashes as usize;
        let b = BLOCK_BITS as f64;

        // distinct[d] = P(k uniform draws from b positions cover exactly d of them)
        let mut distinct = vec![0.0; k + 1];
        distinct[0] = 1.0;
        for _ in 0..k {
            for d in (0..=k).rev() {
                let stay = distinct[d] * d as f64 / b;
                let grow = if d > 0 {
                    distinct[d - 1] * (b - (d - 1) as f64) / b
                } else {
                    0.0
                };
                distinct[d] = stay + grow;
            }
        }

        let coefficients = (0..=k)
            .map(|i| {
                let expected_subsets: f64 = (i..=k).map(|d| distinct[d] * binomial(d, i)).sum();
                if i % 2 == 0 {
                    expected_subsets
                } else {
                    -expected_subsets
                }
            })
            .collect();
        let rates = (0..=k)
            .map(|i| 1.0 - (1.0 - i as f64 / b).powi(num_hashes as i32))
            .collect();
        Self {
            coefficients,
            rates,
        }
    }

    /// False-positive rate with `keys_per_block` keys per block on average.
    pub(crate) fn false_positive_rate(&self, keys_per_block: f64) -> f64 {
        if keys_per_block.is_infinite() {
            return 1.0;
        }
        let sum: f64 = self
            .coefficients
            .iter()
            .zip(&self.rates)
            .map(|(c, r)| c * (-keys_per_block * r).exp())
            .sum();
        sum.clamp(0.0, 1.0)
    }

    /// Expected fraction of set bits with `keys_per_block` keys per block on average.
    pub(crate) fn fill_ratio(&self, keys_per_block: f64) -> f64 {
        1.0 - (-keys_per_block * self.rates[1]).exp()
    }

    /// Keys per block that explain a fill ratio (inverse of [`Self::fill_ratio`]).
    pub(crate) fn keys_per_block(&self, fill_ratio: f64) -> f64 {
        if fill_ratio >= 1.0 {
            return f64::INFINITY;
        }
        -(-fill_ratio).ln_1p() / self.rates[1]
    }

    /// The largest keys-per-block load at which the false-positive rate is at most `fpr`.
    pub(crate) fn max_keys_per_block(&self, fpr: f64) -> f64 {
        let mut low = 0.0;
        let mut high = 1.0;
        while self.false_positive_rate(high) <= fpr {
            low = high;
            high *= 2.0;
            if high > BLOCK_BITS as f64 * 64.0 {
                return high;
            }
        }
        for _ in 0..80 {
            let mid = 0.5 * (low + high);
            if self.false_positive_rate(mid) <= fpr {
                low = mid;
            } else {
                high = mid;
            }
        }
        low
    }
}

/// Number of blocks and positions per key chosen for a capacity and target rate.
///
/// Every key picks one 512-bit block and sets `k` positions in it, drawn independently and
/// uniformly (a key may draw the same position twice). With `n` keys spread over `B` blocks the
/// number of keys sharing the block a query lands in is Binomial(n, 1/B), which we take as
/// Poisson(λ), λ = n / B. Following Putze, Sanders and Singler ("Cache-, Hash- and Space-Efficient
/// Bloom Filters", 2007), the false-positive rate is the average of the in-block rate over that
/// occupancy; unlike their approximation `Σ_j Poisson(j; λ) (1 - (1 - 1/b)^(kj))^k` we compute the
/// average exactly for independent positions:
///
/// - the query's `k` draws cover `d` distinct positions with probability `P_k(d)` (occupancy
///   distribution, computed by recurrence);
/// - a fixed set of `d` positions is all set in a block holding `j` keys with probability
///   `Σ_i (-1)^i C(d, i) (1 - i/b)^(kj)` (inclusion-exclusion over the positions left clear);
/// - averaging `x^j` over Poisson(λ) gives `exp(-λ (1 - x))`, so
///   `FPR(λ) = Σ_i c_i exp(-λ r_i)` with `r_i = 1 - (1 - i/b)^k` and
///   `c_i = (-1)^i Σ_d P_k(d) C(d, i)`.
///
/// The same model gives the expected fraction of clear bits, `exp(-λ r_1)`, which inverts to the
/// cardinality estimate `n = -B ln(1 - X/m) / r_1`: Swamidass and Baldi's `-(m/k) ln(1 - X/m)` with
/// the per-block rate `r_1` in place of `k/b` (they differ by 0.6% at b = 512, k = 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// 512-bit blocks in the filter.
    pub num_blocks: u64,
    /// Bit positions set per key.
    pub num_hashes: u32,
}

impl Sizing {
    /// The smallest filter whose modelled false-positive rate at `capacity` keys is at most
    /// `target_fpr`; among equally small ones, the one with the fewest positions per key.
    pub fn for_capacity(capacity: u64, target_fpr: f64) -> Self {
        let capacity = capacity.max(1) as f64;
        let mut best: Option<Sizing> = None;
        for num_hashes in 1..=MAX_HASHES {
            let load = BlockModel::new(num_hashes).max_keys_per_block(target_fpr);
            let num_blocks = (capacity / load).ceil().max(1.0) as u64;
            if best.is_none_or(|b| num_blocks < b.num_blocks) {
                best = Some(Sizing {
                    num_blocks,
                    num_hashes,
                });
            }
        }
        best.unwrap_or(Sizing {
            num_blocks: 1,
            num_hashes: 1,
        })
    }

    /// The positions per key that minimise the modelled false-positive rate at `capacity` keys
    /// in a filter of `num_bits` bits (rounded up to whole blocks).
    pub fn for_bits(capacity: u64, num_bits: u64) -> Self {
        let num_blocks = num_bits.div_ceil(BLOCK_BITS).max(1);
        let load = capacity.max(1) as f64 / num_blocks as f64;
        let num_hashes = (1..=MAX_HASHES)
            .map(|k| (k, BlockModel::new(k).false_positive_rate(load)))
            .fold((1, f64::INFINITY), |best, candidate| {
                if candidate.1 < best.1 {
                    candidate
                } else {
                    best
                }
            })
            .0;
        Sizing {
            num_blocks,
            num_hashes,
        }
    }

    /// Total bits.
    pub fn num_bits(&self) -> u64 {
        self.num_blocks * BLOCK_BITS
    }

    /// Modelled false-positive rate once `keys` distinct keys are inserted.
    pub fn false_positive_rate(&self, keys: u64) -> f64 {
        BlockModel::new(self.num_hashes).false_positive_rate(keys as f64 / self.num_blocks as f64)
    }
}

fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_filter_has_no_false_positives() {
        for k in 1..=MAX_HASHES {
            // The alternating sum loses up to ~1e-10 to rounding at k = 24.
            assert!(BlockModel::new(k).false_positive_rate(0.0) < 1e-9);
        }
    }

    #[test]
    fn one_position_per_key_is_the_fill_ratio() {
        let model = BlockModel::new(1);
        for load in [1.0, 50.0, 300.0] {
            let fill = model.fill_ratio(load);
            assert!((model.false_positive_rate(load) - fill).abs() < 1e-12);
        }
    }

    #[test]
    fn model_matches_a_direct_sum_over_block_loads() {
        // Direct evaluation: Poisson weights times the exact in-block rate for j keys.
        let k = 7;
        let load = 50.0_f64;
        let b = BLOCK_BITS as f64;
        let mut distinct = vec![0.0; k + 1];
        distinct[0] = 1.0;
        for _ in 0..k {
            for d in (0..=k).rev() {
                let grow = if d > 0 {
                    distinct[d - 1] * (b - (d - 1) as f64) / b
                } else {
                    0.0
                };
                distinct[d] = distinct[d] * d as f64 / b + grow;
            }
        }
        let mut direct = 0.0;
        let mut weight = (-load).exp();
        for j in 0..400 {
            if j > 0 {
                weight *= load / j as f64;
            }
            let in_block: f64 = (0..=k)
                .map(|d| {
                    let all_set: f64 = (0..=d)
                        .map(|i| {
                            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
                            sign * binomial(d, i) * (1.0 - i as f64 / b).powi((k * j) as i32)
                        })
                        .sum();
                    distinct[d] * all_set
                })
                .sum();
            direct += weight * in_block;
        }
        let closed = BlockModel::new(k as u32).false_positive_rate(load);
        assert!(
            (closed - direct).abs() < 1e-9 * direct,
            "{closed} vs {direct}"
        );
    }

    #[test]
    fn a_full_filter_answers_yes_to_everything() {
        let model = BlockModel::new(7);
        assert_eq!(model.false_positive_rate(model.keys_per_block(1.0)), 1.0);
    }

    #[test]
    fn fill_ratio_inverts() {
        let model = BlockModel::new(6);
        for load in [0.5, 10.0, 51.2, 120.0] {
            let back = model.keys_per_block(model.fill_ratio(load));
            assert!((back - load).abs() < 1e-9 * load);
        }
    }

    #[test]
    fn sizing_meets_the_target_with_fewer_bits_than_one_more_block_each() {
        for p in [0.1, 0.01, 0.001, 0.0001] {
            let sizing = Sizing::for_capacity(1_000_000, p);
            assert!(sizing.false_positive_rate(1_000_000) <= p);
            let smaller = Sizing {
                num_blocks: sizing.num_blocks - sizing.num_blocks / 100,
                ..sizing
            };
            assert!(smaller.false_positive_rate(1_000_000) > p);
        }
    }

    #[test]
    fn blocked_layout_needs_more_bits_than_the_unblocked_formula() {
        let n = 1_000_000_f64;
        for p in [0.01_f64, 0.001] {
            let unblocked = -n * p.ln() / std::f64::consts::LN_2.powi(2);
            let blocked = Sizing::for_capacity(n as u64, p).num_bits() as f64;
            assert!(
                blocked > unblocked * 1.02,
                "p = {p}: {blocked} vs {unblocked}"
            );
        }
    }
}
